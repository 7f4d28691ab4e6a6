"""The Router-R1 run plots read at a glance (issue 16): reward/total never hidden by its parts, whole-number
step ticks, no overprinted labels in accuracy_vs_cost.png."""

import matplotlib

matplotlib.use("Agg")

from rlrouter.eval.router_r1 import label_groups, plot_run, reward_figure  # noqa: E402

# what a 135M policy logs when it never emits a valid format: total == format at every step
METRICS = [{"step": s, "reward/total": -1.0, "reward/format": -1.0, "reward/outcome": 0.0,
            "rollout/format_valid": 0.0, "rollout/em": 0.0} for s in (1, 2, 3)]


def test_reward_total_has_its_own_panel_and_steps_are_whole_numbers():
    import matplotlib.pyplot as plt

    fig = reward_figure(METRICS)
    total = [a for a in fig.axes if a.get_title() == "reward/total"]
    assert len(total) == 1 and [ln.get_label() for ln in total[0].get_lines()] == ["reward/total"]
    parts = [a for a in fig.axes if a.get_title() == "reward parts"][0]
    assert "reward/total" not in [ln.get_label() for ln in parts.get_lines()]
    fig.canvas.draw()
    for ax in fig.axes:
        ticks = [t for t in ax.get_xticks() if ax.get_xlim()[0] <= t <= ax.get_xlim()[1]]
        assert ticks and all(float(t).is_integer() for t in ticks), ticks
    plt.close(fig)


def test_coinciding_points_share_one_label(tmp_path):
    pts = {"always_cheapest": (0.0001, 0.25), "random": (0.0001, 0.25), "policy_trained": (0.00011, 0.2505),
           "always_strongest": (0.02, 0.5)}
    groups = label_groups(pts)
    assert sorted(sorted(g) for _, g in groups) == [["always_cheapest", "policy_trained", "random"],
                                                     ["always_strongest"]]
    results = {n: {"cost_per_query": x, "accuracy": y, "route_share": {"a": 1.0}} for n, (x, y) in pts.items()}
    paths = plot_run(METRICS, results, tmp_path)
    assert [p.rsplit("/", 1)[1] for p in paths] == ["reward_curve.png", "route_shares.png", "accuracy_vs_cost.png"]
