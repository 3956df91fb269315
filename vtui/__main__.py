from vtui.cli import main

raise SystemExit(main())
