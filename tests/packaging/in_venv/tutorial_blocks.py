"""Run inside a fresh venv: docs/tutorial.md's Python blocks (a JSON list of their code, the
file given as the argument), in order, in one namespace, in the work folder; the first block is
also saved as the signup.py it says to save. Prints a JSON object: what each block printed
("printed", a list) and the warnings a reader would see ("warnings": those Python shows by
default, each as "Category: message")."""

import contextlib
import io
import json
import os
import sys
import warnings

with open(sys.argv[1], encoding="utf-8") as f:
    codes = json.load(f)
with open("signup.py", "w", encoding="utf-8") as f:
    f.write(codes[0])
sys.path.insert(0, os.getcwd())  # python -I leaves the folder off the path; the page imports it
namespace = {"__name__": "tutorial"}
printed = []
with warnings.catch_warnings(record=True) as shown:  # (the default filters still decide)
    for number, code in enumerate(codes, 1):
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            exec(compile(code, f"tutorial.md block {number}", "exec"), namespace)
        printed.append(out.getvalue())
seen = [f"{w.category.__name__}: {w.message}" for w in shown]
print(json.dumps({"printed": printed, "warnings": seen}))
