"""Plot the learning curves on page one from the measured numbers in curves.json.

    python docs/figures/plot_curves.py            # writes docs/figures/learn.png, grpo-agentic.png, grpo-pivot.png, learn-chain.png and
                                                  # resolve-vs-imitate.png

The numbers are the held-out pass rates of the runs docs/learn.md, docs/agentic-grpo.md and docs/grpo.md report; each curve in
curves.json carries the command that produced it and the date it was measured. Nothing is run here.
"""

import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

HERE = Path(__file__).resolve().parent


def plot(name: str, figure: dict, out_dir: Path) -> Path:
    fig, ax = plt.subplots(figsize=(7.5, 4.2), dpi=110)
    for curve in figure["curves"]:
        style = {key: curve[key] for key in ("color", "linestyle") if key in curve}  # e.g. one colour a seed, one style an arm
        ax.plot(curve["steps"], curve["pass_rate"], marker="o", linewidth=2, label=curve["label"], **style)
    ax.set_title(figure["title"], fontsize=11)
    ax.set_xlabel(figure["xlabel"])
    ax.set_ylabel(figure["ylabel"], fontsize=9)
    ax.set_ylim(0, figure.get("ymax", 1))  # a figure whose rates stay low says its own ymax
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    out = out_dir / name
    fig.savefig(out)
    plt.close(fig)
    return out


def main() -> None:
    data = json.loads((HERE / "curves.json").read_text())
    for name, figure in data["figures"].items():
        print(plot(name, figure, HERE))


if __name__ == "__main__":
    main()
