"""scripts/figures.py: the pictures hold what a reader looks for (axes in epochs and minutes,
labels, one line per model and stage, the accuracies in the title), read back from the Figure."""
import figures  # noqa: E402


def test_the_loss_curves_are_in_epochs_on_a_log_axis(tmp_path):
    curves = {'vanilla/pretrain': [(s, 3.0 * 0.99 ** s) for s in range(300)],  # 3 epochs of 100
              'vanilla/finetune': [(s, 1.0) for s in range(20)],
              'rope/pretrain': [(s, 2.0) for s in range(200)]}
    fig = figures.loss_curves(curves, {'vanilla/pretrain': 100, 'rope/pretrain': 50,
                                       'vanilla/finetune': 10},
                              'dev accuracy: vanilla 19.6%; London baseline 5.0%', tmp_path / 'l.png')
    assert (tmp_path / 'l.png').read_bytes()[:8] == b'\x89PNG\r\n\x1a\n'
    pre, fine = fig.axes
    assert fig.get_suptitle() == 'dev accuracy: vanilla 19.6%; London baseline 5.0%'
    assert (pre.get_title(), fine.get_title()) == ('pretraining', 'finetuning')
    assert [ax.get_xlabel() for ax in fig.axes] == ['epoch', 'epoch']
    assert [ax.get_yscale() for ax in fig.axes] == ['log', 'log']
    assert 'loss' in pre.get_ylabel()
    assert [len(pre.get_lines()), len(fine.get_lines())] == [2, 1]
    by_label = {line.get_label(): line for line in pre.get_lines()}
    assert set(by_label) == {'rope (mean of 2 steps)', 'vanilla (mean of 3 steps)'}
    assert by_label['vanilla (mean of 3 steps)'].get_xdata()[-1] == 3.0  # step 300 of 100 a epoch
    assert by_label['rope (mean of 2 steps)'].get_xdata()[-1] == 4.0
    assert [t.get_text() for t in pre.get_legend().get_texts()] == sorted(by_label)
    assert len(pre.get_xticks()) > 2 and len(pre.get_yticks()) > 2


def test_a_stage_without_epochs_is_drawn_in_steps_and_says_so(tmp_path):
    fig = figures.loss_curves({'vanilla/pretrain': [(s, 2.0) for s in range(10)]}, {}, 't',
                              tmp_path / 'l.png')
    pre, fine = fig.axes
    assert pre.get_xlabel() == 'step' and list(pre.get_lines()[0].get_xdata()) == list(range(1, 11))
    assert fine.get_lines() == [] and fine.texts[0].get_text() == 'no finetuning logged'


def test_moving_mean():
    assert figures.moving_mean([1.0, 3.0, 5.0, 7.0], 2) == [1.0, 2.0, 4.0, 6.0]
    assert figures.moving_mean([4.0, 2.0], 1) == [4.0, 2.0]


def test_the_budget_curve_has_its_axes_and_the_london_line(tmp_path):
    points = [dict(minutes=9.2, dev=dict(percent=2.0), pretrain_epochs=11),
              dict(minutes=19.1, dev=dict(percent=8.0), pretrain_epochs=23),
              dict(minutes=40.0, dev=None, pretrain_epochs=None)]
    fig = figures.budget_curve(points, 5.0, 'vanilla: dev accuracy against time budget', tmp_path / 'b.png')
    ax, = fig.axes
    assert (ax.get_xlabel(), ax.get_ylabel()) == ('minutes, whole pipeline', 'dev accuracy (%)')
    assert ax.get_title() == 'vanilla: dev accuracy against time budget'
    runs, london = ax.get_lines()
    assert list(runs.get_xdata()) == [9.2, 19.1] and list(runs.get_ydata()) == [2.0, 8.0]
    assert list(london.get_ydata()) == [5.0, 5.0] and london.get_label() == 'London baseline (5.0%)'
    assert [t.get_text() for t in ax.texts] == ['2.0% (11 ep.)', '8.0% (23 ep.)']
    assert ax.get_xlim()[1] == 44.0  # the run without an accuracy still sets the axis
