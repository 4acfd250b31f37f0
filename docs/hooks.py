"""MkDocs hook: the benchmarks page, and the result files and plots that the pages link to.

The pages link them where they lie in the repository (`../benchmarks/README.md`,
`../benchmarks/results/NAME.json`, `../benchmarks/plots/NAME.png`), so that the links also
work when the Markdown is read in the repository itself; this hook adds those files to the
site under `benchmarks/`, so that the strict build checks every such link and the site
carries the files its figures come from.
"""

from __future__ import annotations

from pathlib import Path

from mkdocs.structure.files import File, Files, InclusionLevel

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = (("benchmarks", "README.md"), ("benchmarks/results", "*.json"),
           ("benchmarks/plots", "*.png"))  # fmt: skip


def on_files(files: Files, config) -> Files:
    """Each shipped file as `../benchmarks/...` (relative to docs/), written to
    `benchmarks/...` in the site (the README as the page `benchmarks/`)."""
    for folder, pattern in SHIPPED:
        for path in sorted((ROOT / folder).glob(pattern)):
            name = f"{folder}/{path.name}"
            dest = f"{folder}/index.html" if path.name == "README.md" else name
            file = File(f"../{name}", config["docs_dir"], config["site_dir"],
                        config["use_directory_urls"], dest_uri=dest)  # fmt: skip
            file.inclusion = InclusionLevel.INCLUDED  # not hidden for its leading '..'
            files.append(file)
    return files
