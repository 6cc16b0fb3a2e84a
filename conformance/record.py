"""What every conformance record carries and how it is written: the versions that
made it (torch, deepspeed, python, zrepro's commit, the machine) and a write through
a temporary file and a rename, so a record is never half-written."""
import json
import os
import platform
import subprocess

HERE = os.path.dirname(os.path.abspath(__file__))


def zrepro_commit():
    """HEAD, with "-dirty" when the tree differs from it outside the record itself."""
    git = ["git", "-C", os.path.dirname(HERE)]
    head = subprocess.run(git + ["rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    changed = subprocess.run(git + ["status", "--porcelain", "--untracked-files=no", "--", ".",
                                    ":!conformance/results", ":!docs/design/CONFORMANCE.md"],
                             capture_output=True, text=True).stdout.strip()
    return head + ("-dirty" if changed else "")


def versions():
    import deepspeed
    import torch
    return {"torch": torch.__version__, "deepspeed": deepspeed.__version__, "python": platform.python_version(),
            "zrepro_commit": zrepro_commit(), "machine": platform.processor() or platform.machine()}


def write(path, obj):
    with open(path + ".tmp", "w") as f:
        json.dump(obj, f, indent=1, default=str)
        f.write("\n")
    os.replace(path + ".tmp", path)
