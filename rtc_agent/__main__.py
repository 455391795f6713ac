import sys

from rtc_agent.cli import main

sys.exit(main())
