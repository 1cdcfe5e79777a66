"""Every measured figure of the README and the docs pages names the command, commit, date and machine
that made it (tests/test_docs.py runs the pages' blocks; this reads their prose and tables)."""

import os
import re

from docs_data import PAGES, ROOT, slug

# Provenance: every measured figure names the command, commit, date and machine that made it.
FIGURE = re.compile("|".join((
    r"(?<![\w.])\d[\d,]*\.\d+ ?%",  # 30.6%
    r"(?<![\w.])\d+(?:\.\d+)?x\b",  # 3.2x
    r"(?<![\w.])\d[\d,]*(?:\.\d+)? ?(?:tokens|sentences|requests|words|pairs|steps)/s\b",  # 491 sentences/s
    r"(?<![\w.])\d+\.\d+ ?(?:s|ms|min|minutes|seconds|hours)\b",  # 1.0 s, 21.9 minutes
    r"(?<![\w.])\d[\d,.]* ?(?:[KMG]B|GFLOP)/s\b")))  # 6.4 MB/s, 181 GFLOP/s
DECIMAL = re.compile(r"(?<![\w.])\d[\d,]*\.\d+(?![\w.])")  # 30.6, 4,575.8; not 4.4M (a size), not v1.1
VERSION = re.compile(r"\b(?:SQuAD|v|torch|Python|version) ?\d+(?:\.\d+)+(?: / \d+(?:\.\d+)+)?")
COMMIT = re.compile(r"\b(?=[0-9a-f]*\d)[0-9a-f]{7,40}\b")  # 838ed64, 7555455
DATE = re.compile(r"\b20\d\d-[01]\d-[0-3]\d\b")
MACHINE = re.compile(r"Intel Xeon|AMD EPYC|NVIDIA|\b[AH][1-9]00\b")
COMMAND = re.compile(r"`(?:python|bertforge|make|CI=true) [^`]*`")
CITED = "not measured here"  # a section of others' figures (the papers'), said so in its text


def sections(text: str) -> list[list[tuple[int, str, bool]]]:
    """A page cut at its headings (any level): each section's lines as (number, line, inside a fence)."""
    cut: list[list[tuple[int, str, bool]]] = [[]]
    fenced = False
    for number, line in enumerate(text.split("\n"), start=1):
        fence = line.lstrip().startswith("```")
        if not fenced and re.match(r"#+ ", line):
            cut.append([])
        cut[-1].append((number, line, fenced or fence))
        fenced ^= fence
    return cut


def paragraphs(section: list[tuple[int, str, bool]]) -> list[list[tuple[int, str]]]:
    """Its prose paragraphs (a list item starts its own), outside fences and headings."""
    found: list[list[tuple[int, str]]] = []
    current: list[tuple[int, str]] = []
    for number, line, fenced in section:
        if fenced or not line.strip() or line.startswith("#"):
            found, current = found + [current] * bool(current), []
            continue
        if re.match(r"\s*(?:[-*]|\d+\.) ", line) and current:
            found, current = found + [current], []
        current.append((number, line))
    return found + [current] * bool(current)


def is_provenance(paragraph: str, section: list[tuple[int, str, bool]]) -> bool:
    """A paragraph naming a commit, a date and a machine, in a section that shows the command (a code block
    or a quoted `python/bertforge/make ...` line) or that says none was recorded."""
    if not (COMMIT.search(paragraph) and DATE.search(paragraph) and MACHINE.search(paragraph)):
        return False
    shown = any(fenced for _, _, fenced in section) or any(COMMAND.search(line) for _, line, _ in section)
    return shown or "no command recorded" in paragraph


def unproven_figures(pages: dict[str, str]) -> list[str]:
    """Each table of measured figures (a body cell with a decimal number) and each prose line stating a
    figure (a decimal percentage, a ratio such as 3.2x, a rate per second, a decimal duration) whose
    section has no provenance paragraph (`is_provenance`) and, for a line, whose paragraph links to no
    section that has one. Code spans and code blocks are left out: they hold commands and formats."""
    def has_provenance(section) -> bool:
        texts = [" ".join(line for _, line in p) for p in paragraphs(section)]
        return any(is_provenance(t, section) for t in texts) or any(CITED in t for t in texts)

    cut = {page: sections(text) for page, text in pages.items()}
    proven = {(page, slug(section[0][1].lstrip("#"))): has_provenance(section)  # the anchors links name
              for page, page_sections in cut.items() for section in page_sections[1:]}
    problems = []
    for page, page_sections in cut.items():
        for section in page_sections:
            if has_provenance(section):
                continue
            lead: list[tuple[int, str]] = []  # the paragraph introducing a list ("...:"); its items share its links
            for paragraph in paragraphs(section):
                item = re.match(r"\s*(?:[-*]|\d+\.) ", paragraph[0][1])
                if not item:
                    lead = paragraph if paragraph[-1][1].rstrip().endswith(":") else []
                # code spans (which may run over a line end) are commands and formats, not figures
                unquoted = re.sub(r"`[^`]*`", lambda m: re.sub(r"[^\n]", " ", m.group()),
                                  "\n".join(line for _, line in paragraph)).split("\n")
                for (number, line), bare in zip(paragraph, unquoted):
                    plain = VERSION.sub("", bare)
                    if line.lstrip().startswith("|"):
                        if not re.fullmatch(r"\s*\|[-| :]+\|\s*", line) and DECIMAL.search(plain):
                            problems.append(f"{page}, line {number}: a table of measured figures without provenance")
                            break
                        continue
                    figure = FIGURE.search(plain)
                    if not figure:
                        continue
                    links = re.findall(r"\]\(([^)\s]*)#([^)\s]+)\)",
                                       " ".join(text for _, text in paragraph + (lead if item else [])))
                    here = os.path.dirname(page)
                    if any(proven.get((os.path.normpath(os.path.join(here, target)) if target else page, anchor))
                           for target, anchor in links):
                        continue
                    problems.append(f"{page}, line {number}: {figure.group()!r} without provenance")
    return problems


def test_every_measured_figure_has_its_provenance():
    """Every table of measured figures and every line stating one has, in its section, a provenance
    paragraph in the form of docs/benchmarks.md's "Measured at COMMIT (DATE), the MACHINE ...", beside
    the command that made it (or "no command recorded"), or links to a section that has one. The rule is
    checked first on made-up pages, so that it cannot pass by finding nothing."""
    table = "| model | accuracy |\n|---|---|\n| ours | 30.6 |\n"
    made_up = {
        "docs/bare.md": "# Bare\n\n## Speed\n\n" + table + "\nOurs is 3.2x theirs.\n",
        "docs/proven.md": ("# Proven\n\n## Speed\n\n```bash\npython benchmarks/speed.py\n```\n\n" + table +
                           "\nMeasured at 667893a (2026-11-24), the 2-core AMD EPYC, torch 2.13.0.\n\n"
                           "## By hand\n\nA profile: 82.5% in `addmm`.\n\n"
                           "Measured at 667893a (2026-11-24), the 2-core AMD EPYC; no command recorded.\n"),
        "README.md": ("# Readme\n\n## Results\n\n- Speed: 3.2x ([speed](docs/proven.md#speed)).\n"
                      "- Accuracy 30.6% ([bare](docs/bare.md#speed)).\n"),
    }
    assert unproven_figures(made_up) == ["docs/bare.md, line 7: a table of measured figures without provenance",
                                         "docs/bare.md, line 9: '3.2x' without provenance",
                                         "README.md, line 6: '30.6%' without provenance"]
    # the provenance line needs all three (commit, date, machine), and a command in its section
    for missing in ("667893a ", "(2026-11-24)", "AMD EPYC"):
        page = made_up["docs/proven.md"].replace(missing, "", 1)
        assert unproven_figures({"docs/proven.md": page}), missing
    assert unproven_figures({"docs/proven.md": made_up["docs/proven.md"].replace("```bash\npython benchmarks/speed.py"
                                                                                 "\n```\n", "")})
    # a list's items share the links of the line that introduces it; code spans are formats, not figures
    listed = "# Listed\n\nAgainst the targets, on [the table](proven.md#speed):\n- 3.2x\n- 1.5x\n\n`accuracy 91.3%`\n"
    assert unproven_figures({**made_up, "docs/listed.md": listed})[3:] == []
    assert unproven_figures({"docs/listed.md": listed.replace("proven.md#speed", "bare.md#speed"), **made_up})[:2] == [
        "docs/listed.md, line 4: '3.2x' without provenance", "docs/listed.md, line 5: '1.5x' without provenance"]
    pages = {page: (ROOT / page).read_text() for page in PAGES if page != "docs/cli-reference.md"}  # generated
    problems = unproven_figures(pages)
    assert not problems, "figures without their command, commit, date and machine:\n" + "\n".join(problems)
