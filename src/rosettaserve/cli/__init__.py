"""The command line: ``rosettaserve serve|scheduler|...`` -> settings; its help and log options."""
