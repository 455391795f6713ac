"""Where the speech set's audio comes from, one module per source: ``espeak`` (voices synthesized by espeak-ng),
``asterisk`` (the Asterisk core prompts, one recorded speaker, from Debian packages) and ``pypi`` (recorded speech
of several speakers from the test data of speech packages' source distributions on PyPI)."""
