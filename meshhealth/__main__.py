from meshhealth.cli.main import main

raise SystemExit(main())
