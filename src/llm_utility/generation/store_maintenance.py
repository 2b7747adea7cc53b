"""The store's maintenance commands under their former name: ``python -m
llm_utility.generation.store_maintenance {verify,compact,migrate}`` runs ``python -m
llm_utility.generation.store`` (``generation.store.maintenance``), kept for scripts that name it."""

from .store.maintenance import ShardReport, compact, main, migrate, verify

__all__ = ["ShardReport", "compact", "main", "migrate", "verify"]

if __name__ == "__main__":
    raise SystemExit(main())
