"""The tests, a folder per package of ``kevin_agent`` (``tests/evaluate`` holds the evaluator's,
``tests/tui`` the terminal UI's with its snapshots, ...), so a change to a package has its tests
beside it. At the top: what spans the packages (the end-to-end run, the README's commands, the
examples, packaging, the layout and ``docs/architecture.md``) and the helpers the folders share
(``clihelp``, ``run_records``, ``evalfixtures``, ``tui_support``, ``servers/``, ``cheats/``)."""
