"""Engine (free to change): what the grader (scripts/grading/grade.py) takes from the engine, in
one place, so that it names one entry point rather than the engine's rooms.

The data and its checks as run.py reads them, the score of a predictions file, a submission's
params read without running its pickle and compared with the model's keys and shapes, the model
run.py builds for a command line, the batched decoder run.py evaluates with, and the engine's
one-line errors, whole-or-nothing writes and output checks."""
from engine.command.inputs import (evaluate_places, read_corpus,  # noqa: F401
                                   read_gold_lines, read_questions)
from engine.command.params import ParamsProblem, params_mismatch, read_state  # noqa: F401
from engine.command.paths import out_folder_problem, output_problem  # noqa: F401
from engine.command.stages import describe_model, model_config  # noqa: F401
from engine.common import OneLineParser, UsageError, atomic_write  # noqa: F401
from engine.datafiles import DATA  # noqa: F401
from engine.devices import pick_device  # noqa: F401
from engine.fast.decode import predict  # noqa: F401
