"""The fine-tune dialog's loss plot: the curve is the run's points, the x axis spans the run's steps."""

from __future__ import annotations

import numpy as np

from s2studio.ui.voices.finetune.loss_plot import LossPlot


def drawn(plot: LossPlot) -> list[tuple[float, float]]:
    xs, ys = plot.curve.getData()
    return [] if xs is None else list(zip(xs.tolist(), ys.tolist(), strict=True))


def test_the_curve_follows_the_steps_and_a_new_run_starts_empty(qtbot):
    plot = LossPlot()
    qtbot.addWidget(plot)
    plot.clear(total_steps=40)
    assert plot.empty.isVisible() and drawn(plot) == []
    for step, loss in [(1, 9.5), (2, 9.1), (3, 8.25)]:
        plot.add(step, loss)
    assert [x for x, _ in drawn(plot)] == [1, 2, 3] and np.allclose([y for _, y in drawn(plot)], [9.5, 9.1, 8.25])
    assert not plot.empty.isVisible()
    (x0, x1), _ = plot.view.getPlotItem().viewRange()
    assert x0 < 1 < 40 < x1 < 42  # the whole run's steps, with a little margin
    plot.clear(total_steps=10)
    assert plot.points == [] and drawn(plot) == [] and plot.empty.isVisible()
