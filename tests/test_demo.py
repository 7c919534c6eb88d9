"""The quick-start demo, shortened: it must still reach 97% test accuracy on the digits."""

from __future__ import annotations

from singa_lite import demo


def test_short_demo_reaches_97_percent(tmp_path):
    history = demo.train(epochs=6, out_dir=tmp_path, progress=False, make_plot=True)
    assert history["test_acc"][-1] >= 0.97, history["test_acc"]
    assert history["loss"][-1] < history["loss"][0]
    assert (tmp_path / "loss_accuracy.png").stat().st_size > 10_000


def test_demo_resumes_exactly_from_its_last_checkpoint(tmp_path):
    full = demo.train(epochs=3, out_dir=tmp_path, progress=False, make_plot=False)
    # Lose the last epoch's checkpoint, as if the run had been killed during epoch 3.
    (tmp_path / "checkpoints" / "ckpt-2.h5").unlink()
    resumed = demo.train(epochs=3, out_dir=tmp_path, progress=False, make_plot=False)
    assert resumed == full
