"""`gpupipe examples NAME FOLDER`: an example image folder made from installed packages
(components/sources/example_images.py): digits (scikit-learn's) or shapes (generated)."""
from __future__ import annotations

import argparse


def cmd_examples(args: argparse.Namespace) -> int:
    from components.sources.example_images import write_example

    count = write_example(args.name, args.folder)
    print(f"wrote {count} images into {args.folder} (one folder per class); next: gpupipe init {args.folder}")
    return 0


def add_commands(sub) -> None:
    from components.sources.example_images import EXAMPLES

    p = sub.add_parser("examples", help="write an example image folder (digits, shapes) from installed packages")
    p.add_argument("name", choices=sorted(EXAMPLES))
    p.add_argument("folder", help="a new folder to write ROOT/<class>/*.png into")
    p.set_defaults(func=cmd_examples)
