"""Record the TRL seams the TRL path depends on, for each TRL release given, as a fixture.

Each argument is a TRL wheel (``pip download trl==X --no-deps``) or an installed ``trl``
package directory; its source is parsed with ``ast`` (vigor_cli/integrations/trl_versions.py,
:func:`seams`), never imported. The output, ``tests/fixtures/trl_signatures.json``, maps each
release to its record; tests/test_trl_versions.py checks every supported release's record
against what vigor relies on and the installed TRL's against its own record.

    pip download trl==1.15.0 trl==1.16.0 --no-deps -d /tmp/trl_wheels   # one version per call
    python scripts/extract_trl_signatures.py /tmp/trl_wheels/trl-*.whl -o tests/fixtures/trl_signatures.json
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

from vigor_cli.integrations.trl_versions import seams


def version_of(path: Path) -> str:
    """The release a wheel's name or an installed package's metadata names."""
    match = re.match(r"trl-([^-]+)-", path.name)
    if match:
        return match.group(1)
    from importlib.metadata import version

    return version("trl")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("sources", nargs="+", type=Path, help="TRL wheels or installed trl package directories")
    ap.add_argument("-o", "--out", type=Path, default=Path("tests/fixtures/trl_signatures.json"))
    args = ap.parse_args()
    out = json.loads(args.out.read_text()) if args.out.is_file() else {}
    for source in args.sources:
        record = seams(source)
        record["source"] = source.name if source.is_file() else "installed package"
        out[version_of(source)] = record
    ordered = dict(sorted(out.items(), key=lambda kv: [int(x) if x.isdigit() else x for x in re.split(r"[.]", kv[0])]))
    args.out.write_text(json.dumps(ordered, indent=1, sort_keys=False) + "\n")
    print(f"wrote {args.out}: {', '.join(ordered)}")


if __name__ == "__main__":
    main()
