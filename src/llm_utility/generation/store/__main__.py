"""``python -m llm_utility.generation.store {verify,compact,migrate} <store_dir>/<llm>...``"""

from .maintenance import main

raise SystemExit(main())
