"""The quick-start demo, shortened: it must still reach 97% test accuracy on the digits."""

from __future__ import annotations

from singa_lite import demo


def test_short_demo_reaches_97_percent(tmp_path):
    history = demo.train(epochs=6, out_dir=tmp_path, progress=False, make_plot=True)
    assert history["test_acc"][-1] >= 0.97, history["test_acc"]
    assert history["loss"][-1] < history["loss"][0]
    assert (tmp_path / "loss_accuracy.png").stat().st_size > 10_000
