"""Commands side by side as threads of one process (engine/training/turns.py; run_all.py
--one_process, end to end in test_run_all.py): each holds the baton until the end of each of its
training steps and draws its own random numbers, so each trains exactly as it does alone."""
import io
import random
import sys
import threading
import time

import torch
from torch.utils.data import Subset

import trainer
import utils
from support import LossLog
from engine.training import checkpoint, turns
from test_fast_paths import VARIANTS, data, tiny  # noqa: F401 (data: a fixture)


def together(team, jobs, first_waits_for=2):
    """Run jobs {name: body(member)} as threads, each a member of `team`. The first job's body
    starts once `first_waits_for` members have joined (it holds the baton meanwhile), so that
    the turns do not depend on how fast the threads start; returns their errors."""
    errors, names = [], list(jobs)
    everyone = threading.Event()

    def thread(name):
        try:
            with team.member(name) as member:
                if name == names[0]:
                    everyone.wait(timeout=60)
                jobs[name](member)
        except BaseException as e:  # (reported by the test, not lost in a thread)
            errors.append(e)
    def until(joined):
        while len(team._ring) < joined and not errors:
            time.sleep(0.001)
    threads = [threading.Thread(target=thread, args=(name,)) for name in names]
    threads[0].start()
    until(1)  # the first holds the baton; the others join behind it
    for t in threads[1:]:
        t.start()
    until(first_waits_for)
    everyone.set()
    for t in threads:
        t.join(timeout=300)
    return errors


def test_members_take_turns_and_each_draws_what_it_draws_alone():
    """Two members, three 'steps' each (a draw from torch and from Python's random, then the end
    of a step), each with its own torch threads: their turns alternate, and each draws the
    numbers its seed gives alone, and computes in the torch threads it set (each thread's own
    under OpenMP: this would tell a torch whose threads one thread sets for all)."""
    before = torch.get_num_threads()

    def draws(seed, member=None):
        torch.manual_seed(seed)
        random.seed(seed)
        torch.set_num_threads(seed)
        got = []
        for _ in range(3):
            got.append((torch.rand(3).tolist(), random.random(), torch.get_num_threads()))
            if member is not None:
                member.on_step_end(None, 0, 0)
        return got
    try:
        alone = {name: draws(seed) for name, seed in (('a', 1), ('b', 2))}
        got = {}
        team = turns.Team()
        errors = together(team, {name: lambda m, name=name, seed=seed: got.__setitem__(
            name, draws(seed, m)) for name, seed in (('a', 1), ('b', 2))})
    finally:
        torch.set_num_threads(before)
    assert not errors
    assert got == alone
    assert team.turns == ['a', 'b'] * 4  # (each joins, then 3 steps each, then 'b' alone)
    assert team._ring == [] and team._holder is None


def test_what_a_member_prints_goes_to_its_own_sinks(capsys):
    team = turns.Team()
    sinks = {name: (io.StringIO(), io.StringIO()) for name in 'ab'}

    def job(name):
        with team.member(name, *sinks[name]):
            print(f'out {name}')
            print(f'err {name}', file=sys.stderr)
    with turns.Printing.installed():
        threads = [threading.Thread(target=job, args=(name,)) for name in 'ab']
        for t in threads:
            t.start()
        print('main')
        for t in threads:
            t.join()
    for name, (out, err) in sinks.items():
        assert out.getvalue() == f'out {name}\n' and err.getvalue() == f'err {name}\n'
    assert capsys.readouterr().out == 'main\n'


def test_a_stop_reaches_every_command_in_a_thread():
    """Signals reach only the main thread: Team.stop raises the stop flag of each training
    command running in another thread, and leaves the main thread's own alone."""
    mine = checkpoint.StopRequest().__enter__()
    entered, stopped = threading.Event(), threading.Event()
    flags = []

    def job():
        request = checkpoint.StopRequest().__enter__()
        entered.set()
        stopped.wait(timeout=60)
        flags.append(request.requested)
        request.__exit__()
    t = threading.Thread(target=job)
    t.start()
    entered.wait(timeout=60)
    turns.Team().stop()
    stopped.set()
    t.join()
    mine.__exit__()
    assert flags == [True] and not mine.requested


def train(pre, variant, seed, device, turn=None):
    """A four-layer model with dropout, as the handout's pretraining has, trained by the Trainer
    (the engine's loop, eager steps: a member records none, flags.check_args) for 2 epochs on 12
    examples: (losses, params). As the member `turn` of a team the member is one of the loop's
    extras (TrainerConfig.turn: extras.for_run)."""
    utils.set_seed(seed)
    gpt = tiny(pre.vocab_size, VARIANTS[variant], n_layer=4)
    log = LossLog()
    conf = trainer.TrainerConfig(max_epochs=2, batch_size=4, learning_rate=3e-3, lr_decay=True,
                                 warmup_tokens=4 * 128, final_tokens=4 * 128 * 6, writer=log,
                                 device=device, turn=turn)
    trainer.Trainer(gpt, Subset(pre, range(12)), None, conf).train()
    return log.values, {k: v.detach().cpu() for k, v in gpt.state_dict().items()}


def test_models_trained_as_members_train_as_each_does_alone(data, device):  # noqa: F811
    """Two models (vanilla and rope, seeds of their own, dropout on) trained by the Trainer in
    threads of one team, their steps taking turns: the losses and params each gives alone (on
    the CPU exactly; a GPU's kernels may sum in another order from run to run)."""
    pre, _ = data
    jobs = {'vanilla': 3, 'rope': 4}
    alone = {name: train(pre, name, seed, device) for name, seed in jobs.items()}
    got = {}
    team = turns.Team(device)
    errors = together(team, {name: lambda member, name=name, seed=seed: got.__setitem__(
        name, train(pre, name, seed, device, member)) for name, seed in jobs.items()})
    assert not errors, errors
    assert team.turns.count('vanilla') >= 6 and team.turns.count('rope') >= 6  # turns per step
    for name in jobs:
        (want_losses, want), (got_losses, params) = alone[name], got[name]
        assert len(got_losses) == 6
        if device == 'cpu':
            assert got_losses == want_losses, name
            assert all(torch.equal(params[k], want[k]) for k in want), name
        else:
            assert torch.allclose(torch.tensor(got_losses), torch.tensor(want_losses), atol=1e-4)
            assert all(torch.allclose(params[k], want[k], atol=1e-4) for k in want), name
