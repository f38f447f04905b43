"""The report's "Where and when the jobs ran" from results and ``commands.txt`` (no solo-learn
needed)."""

from __future__ import annotations

from solo_diet.compare.run.record import note_command, run_record_lines


def test_devices_dates_and_commands(tmp_path):
    results = [
        {"run": "diet", "device": "NVIDIA H200", "finished_utc": "2026-11-27 09:14 UTC"},
        {"run": "byol", "device": "NVIDIA H200", "finished_utc": "2026-11-26 17:27 UTC"},
        {
            "run": "simclr",
            "device": "NVIDIA H100 80GB HBM3",
            "finished_utc": "2026-11-28 10:00 UTC",
        },
        {"run": "vicreg"},  # evaluated before results recorded it
        {"run": "swav", "unfinished": True},  # stopped before its evaluation
    ]
    note_command(tmp_path, "spec.yaml", ["data.root=/data/am", "seeds=[1]"], gpus=0)
    with (tmp_path / "commands.txt").open("a") as f:
        f.write("copied the seed-0 folders from another machine\n")

    lines = run_record_lines(results, tmp_path)

    assert lines[0] == "## Where and when the jobs ran"
    assert (
        "- NVIDIA H200: 2 job(s), finished 2026-11-26 17:27 UTC to 2026-11-27 09:14 UTC." in lines
    )
    assert "- NVIDIA H100 80GB HBM3: 1 job(s), finished 2026-11-28 10:00 UTC." in lines
    assert "- 1 job(s) evaluated before results recorded their device." in lines
    noted = next(line for line in lines if "solo-diet compare" in line)
    assert noted.endswith("CPU cores: `solo-diet compare spec.yaml data.root=/data/am 'seeds=[1]'`")
    assert lines[-2] == "- copied the seed-0 folders from another machine"


def test_up_to_thirty_plotted_lines_look_different():
    """The plots give each run its own colour and dash (a 13-line report once had three colours
    twice, so raw_pixels read as cplearn)."""
    from solo_diet.compare.report.curves import _style

    assert len({(s["color"], s["linestyle"]) for s in map(_style, range(30))}) == 30
