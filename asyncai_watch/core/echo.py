"""The former home of :mod:`asyncai_watch.echo`, kept so ``asyncai_watch.core.echo`` imports still work.

The echo rules (caller input capped, secrets redacted) are used by every floor, :mod:`asyncai_watch.errors`
included, so they live on the ground floor beside it; this module only hands the names on.
"""

from asyncai_watch.echo import MASK, QUOTE_CAP, SECRET_PARAMETERS, clip, quoted, redact, redact_url

__all__ = ["MASK", "QUOTE_CAP", "SECRET_PARAMETERS", "clip", "quoted", "redact", "redact_url"]
