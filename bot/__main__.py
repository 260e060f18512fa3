"""``python -m bot`` runs the bot (same as ``detach run``)."""

import sys

from bot.launch import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:] or ["run"]))
