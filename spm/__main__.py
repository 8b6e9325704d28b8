from spm.cli import main

raise SystemExit(main())
