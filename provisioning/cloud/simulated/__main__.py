"""``python -m provisioning.cloud.simulated --port P``: the simulated AWS on 127.0.0.1:P."""

import sys

from provisioning.cloud.simulated.server import main

sys.exit(main())
