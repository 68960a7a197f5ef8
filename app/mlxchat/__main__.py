from mlxchat.cli import main

raise SystemExit(main())
