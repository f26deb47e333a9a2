from rosettaserve.cli import main

raise SystemExit(main())
