"""rlrouter: train and serve LLM routers on Ray."""
