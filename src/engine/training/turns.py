"""Engine (free to change): several commands in one process, taking turns at each training step.

Processes that share one GPU take turns on it; the streams of one process can run their kernels
at the same time. So models trained side by side as threads of one process, each command on a
CUDA stream of its own, can keep busy a GPU that one small model's steps leave idle
(scripts/run_all.py --one_process). The threads hold one baton: a command holds it from its
start to the end of each training step (its step queued on its stream), then hands it on, so
one thread at a time runs Python, and the others' queued steps run on the GPU meanwhile. Its
random states (Python's, torch's, its GPU's) go out with it and come back with the next turn:
each command draws the numbers it draws alone, and gives the params it gives alone
(tests/engine/test_turns.py).
What a command's thread prints goes to that command's own sinks (Printing).
"""
import contextlib
import sys
import threading
import time

import torch

from engine.devices import random_states, set_random_states
from engine.training import checkpoint

_LOCAL = threading.local()


def current():
    """The member this thread runs its command as, or None (a command alone in its process)."""
    return getattr(_LOCAL, 'member', None)


class Team:
    """The commands running in this process's threads, and whose turn it is. `device`: where they
    train (a GPU: each command queues its work on a stream of its own)."""

    def __init__(self, device='cpu'):
        self.device = torch.device(device)
        self._lock = threading.Lock()  # (each member waits on a condition of its own over it)
        self._ring, self._holder = [], None
        self.turns = []  # the members' names in the order they held the baton (tests read it)

    @contextlib.contextmanager
    def member(self, name, stdout=None, stderr=None):
        """Run one command as `name` in this thread: wait for the baton, hold it but at the end
        of each training step (the Member is a trainer extra: extras.for_run), hand it on at
        the end. stdout, stderr: where the command's printed text goes (Printing's).

        The baton is held from the command's start, not only in its training: the random
        generators (Python's, torch's, the GPU's) are the process's, and a start draws from
        them (the seeds, the weights' initialisation): two starts at once would draw each
        other's numbers. An evaluation draws none and could let go; it holds on too, since
        what letting go would buy (other members' steps while it decodes) is not measured."""
        member = Member(self, name, stdout, stderr)
        with self._lock:
            self._ring.append(member)
            if self._holder is None:
                self._holder = member
            self._wait(member)
        _LOCAL.member = member
        try:
            with member.stream():
                yield member
        finally:
            _LOCAL.member = None
            with self._lock:
                at = self._ring.index(member)
                self._ring.remove(member)
                self._hand_to(self._ring[at % len(self._ring)] if self._ring else None)

    def stop(self):
        """Every member asked to stop as a signal would ask a command alone (a checkpoint after
        its step, then exit 130): signals reach only the main thread, which calls this."""
        checkpoint.stop_threads()

    def _wait(self, member):
        while self._holder is not member:
            member.turn.wait()
        self.turns.append(member.name)

    def _hand_to(self, member):
        """The baton to `member` (None: nobody left), waking it alone."""
        self._holder = member
        if member is not None:
            member.turn.notify()

    def pass_on(self, member):
        """Hand the baton to the next command and wait for it to come back; the random states
        go out and come back with it (alone, nothing to hand over). Torch's CPU threads need
        not: each thread sets its own (OpenMP's setting is per thread)."""
        with self._lock:
            if len(self._ring) == 1:
                return
            states = random_states(self.device)
            self._hand_to(self._ring[(self._ring.index(member) + 1) % len(self._ring)])
            self._wait(member)
            set_random_states(states, self.device)


class Member:
    """One command of a Team, in its thread; as a trainer extra it hands the baton on after
    each step (after the checkpoint's extra, which may stop the command there)."""

    def __init__(self, team, name, stdout, stderr):
        self.team, self.name = team, name
        self.turn = threading.Condition(team._lock)  # notified when the baton comes to it
        self.sinks = {'stdout': stdout, 'stderr': stderr}
        self.started = time.time()  # (its --time_budget counts from here, not the process's start)

    @contextlib.contextmanager
    def stream(self):
        """The command's GPU work on its thread's own stream (one for all the thread's commands:
        each stream keeps its own cache of freed memory), waited for when the command ends."""
        if self.team.device.type != 'cuda':
            yield
            return
        stream = getattr(_LOCAL, 'stream', None)
        if stream is None:
            stream = _LOCAL.stream = torch.cuda.Stream(self.team.device)
        stream.wait_stream(torch.cuda.current_stream(self.team.device))
        try:
            with torch.cuda.stream(stream):
                yield
        finally:
            stream.synchronize()

    def on_step_end(self, run, epoch, it):
        self.team.pass_on(self)


class Printing:
    """sys.stdout and sys.stderr while a team runs: a member's thread writes to that member's
    sinks (where it has one), every other thread to the streams that were there."""

    def __init__(self, name):
        self.name, self.original = name, getattr(sys, name)

    def target(self):
        member = current()
        sink = member.sinks[self.name] if member is not None else None
        return self.original if sink is None else sink

    def write(self, text):
        return self.target().write(text)

    def flush(self):
        return self.target().flush()

    def __getattr__(self, attr):  # isatty, encoding, fileno: the target's
        return getattr(self.target(), attr)

    @classmethod
    @contextlib.contextmanager
    def installed(cls):
        streams = {name: cls(name) for name in ('stdout', 'stderr')}
        for name, stream in streams.items():
            setattr(sys, name, stream)
        try:
            yield
        finally:
            for name, stream in streams.items():
                setattr(sys, name, stream.original)
