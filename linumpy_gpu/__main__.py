import sys

from linumpy_gpu.cli import main

sys.exit(main())
