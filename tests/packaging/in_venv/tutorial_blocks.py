"""Run inside a fresh venv: docs/tutorial.md's Python blocks (a JSON list of their code, the
file given as the argument), in order, in one namespace, in the work folder; the first block is
also saved as the signup.py it says to save. Prints a JSON list of what each block printed."""

import contextlib
import io
import json
import os
import sys

with open(sys.argv[1], encoding="utf-8") as f:
    codes = json.load(f)
with open("signup.py", "w", encoding="utf-8") as f:
    f.write(codes[0])
sys.path.insert(0, os.getcwd())  # python -I leaves the folder off the path; the page imports it
namespace = {"__name__": "tutorial"}
printed = []
for number, code in enumerate(codes, 1):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, f"tutorial.md block {number}", "exec"), namespace)
    printed.append(out.getvalue())
print(json.dumps(printed))
