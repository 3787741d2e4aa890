"""A sweep as a JUnit XML report (``SWEEP_DIR/junit.xml``), one test case per job, for
the test-report readers of CI systems (GitLab, Jenkins, GitHub actions' reporters).

Mapping: ``ok`` passes; ``fail`` is a ``<failure>`` (the comparison failed); ``error``,
``timeout`` and ``missing`` are ``<error>`` elements. The case's name is the job number
and its overrides; its message is the job's reason; ``time`` is its wall time (s). The
suite carries the verdict the other outputs render (``sweep.report.findings``): one
``<property name="finding.<CODE>" value="<sentence>"/>`` per finding in their order, the
headline as ``<property name="headline">``, and the headline and the finding lines as the
suite's ``<system-out>``. Written with the standard library's ``xml.etree.ElementTree``.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from typing import Any, Dict, Sequence


def to_junit(rows: Sequence[Dict[str, Any]], name: str, findings: Sequence[Dict[str, Any]] = (),
             headline: str = "") -> str:
    """The JUnit XML text of the report rows (``sweep.report.summary.collect``) of sweep
    ``name``, with its ``findings`` (``summary.json``'s: ``code``, ``kind``, ``sentence``) and
    ``headline`` on the suite."""
    failures = sum(r["status"] == "fail" for r in rows)
    errors = sum(r["status"] not in ("ok", "fail") for r in rows)
    total_time = sum(r.get("wall_s") or 0.0 for r in rows)
    suites = ET.Element("testsuites", name="sweep", tests=str(len(rows)), failures=str(failures),
                        errors=str(errors), time=f"{total_time:.3f}")
    suite = ET.SubElement(suites, "testsuite", name=name, tests=str(len(rows)), failures=str(failures),
                          errors=str(errors), skipped="0", time=f"{total_time:.3f}")
    if findings or headline:
        props = ET.SubElement(suite, "properties")
        if headline:
            ET.SubElement(props, "property", name="headline", value=headline)
        for found in findings:
            ET.SubElement(props, "property", name=f"finding.{found['code']}", value=found["sentence"])
    for row in rows:
        overrides = " ".join(f"{k}={v}" for k, v in row["overrides"].items()) or "(defaults)"
        case = ET.SubElement(suite, "testcase", classname=f"sweep.{name}", name=f"job {row['job']}: {overrides}",
                             time=f"{row.get('wall_s') or 0.0:.3f}")
        reason = row.get("reason") or ""
        if row["status"] == "fail":
            element = ET.SubElement(case, "failure", message=reason, type="loss drift")
            element.text = _details(row)
        elif row["status"] != "ok":
            element = ET.SubElement(case, "error", message=reason, type=row["status"])
            element.text = reason
        if row.get("notes"):
            ET.SubElement(case, "system-out").text = row["notes"]
    if findings or headline:
        lines = [headline] + [f"{f['code']} {f['kind']}: {f['sentence']}" for f in findings if f["code"] != "V000"]
        ET.SubElement(suite, "system-out").text = "\n".join(line for line in lines if line)
    ET.indent(suites)
    return ET.tostring(suites, encoding="unicode", xml_declaration=True) + "\n"


def _details(row: Dict[str, Any]) -> str:
    keys = ("first_fail_step", "n_fail", "max_abs_diff", "max_rel_diff", "mean_signed_diff", "drift", "notes")
    return "\n".join(f"{k}: {row.get(k)}" for k in keys if row.get(k) is not None)
