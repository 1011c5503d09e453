"""`python -m harness.cli`, as bundles' READMEs and older notes spell it: the `parity` command."""

from harness.run.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
