"""scripts/dev/bf16_kernels.py: the losses it reads from run.py's progress lines and its table."""
import os


import bf16_kernels  # noqa: E402


def test_the_loss_is_read_from_progress_lines_without_the_sentence_s_full_stop():
    text = ('epoch 1 iter 0: train loss 5.55502. lr 6.0e-03:   0%|\r'
            'epoch 1 iter 22: train loss 3.41000. lr 5.999655e-03: 100%|\r'
            'epoch 2 iter 22: train loss 3.12428. lr 5.998261e-03')
    assert bf16_kernels.losses(text) == {1: 3.41, 2: 3.12428}  # an epoch's last batch


def test_the_table_marks_epochs_a_stopped_run_did_not_reach(tmp_path):
    out = str(tmp_path / 'table.md')
    rows = [('bf16-flash', 'bf16', 'FLASH_ATTENTION', 0.1, {1: 3.41, 10: 2.66}, 12.0, ''),
            ('fp32-default', 'fp32', None, 0.1, {}, 3.0, 'exit 1: boom')]
    bf16_kernels.write(out, rows, [1, 10, 40], ['# title'])
    lines = open(out, encoding='utf-8').read().splitlines()
    assert lines[-2] == '| bf16-flash | bf16 | FLASH_ATTENTION | 0.1 | 3.41 | 2.66 | - | 12 |  |'
    assert lines[-1] == '| fp32-default | fp32 | default | 0.1 | - | - | - | 3 | exit 1: boom |'
    assert os.listdir(tmp_path) == ['table.md']  # written whole: no temporary left
