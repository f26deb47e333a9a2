from rosettaserve.cli.main import main

raise SystemExit(main())
