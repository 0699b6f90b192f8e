"""oneline.py: bad input in the project's scripts as in thx: one line on stderr, exit 2.

    from oneline import fail, Parser
Parser is argparse.ArgumentParser whose own errors (an unknown option, a missing argument)
are one line too, instead of argparse's usage block.
"""
import argparse
import os
import sys


def fail(message):
    print(f"{os.path.basename(sys.argv[0])}: {message}", file=sys.stderr)
    sys.exit(2)


class Parser(argparse.ArgumentParser):
    def error(self, message):
        fail(f"{message} (--help lists the arguments)")
