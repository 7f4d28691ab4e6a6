"""Ray Serve wiring of rlrouter (thin deployments); see serve/app.py and serve/config.yaml."""
