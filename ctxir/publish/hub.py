"""``ctxir hub push|validate``: stage, validate and upload a training output to the Hugging Face Hub; ``--dry-run``
(or an upload that cannot happen) leaves the validated folder and prints the ``hf upload`` command."""

from __future__ import annotations

import shlex
import sys
from dataclasses import dataclass, field
from pathlib import Path

from ctxir.cli import cli_main, flag
from ctxir.publish.metrics_file import METRICS_FILE
from ctxir.publish.staging import StagedRepo, check_repo_id, stage, validate
from ctxir.types import CtxirError


class PublishError(CtxirError):
    """The folder is staged and valid, but the upload did not happen; the message says how to finish it."""


def push(
    folder: str | Path,
    repo_id: str,
    private: bool = False,
    revision: str | None = None,
    create_pr: bool = False,
    commit_message: str | None = None,
    token: str | None = None,
    endpoint: str | None = None,
    api=None,
    dry_run: bool = False,
) -> str:
    """Upload a staged folder as `hf upload` would; → the commit (or PR) URL, or with ``dry_run`` that command."""
    from huggingface_hub import HfApi, constants, get_token
    from huggingface_hub.errors import HfHubHTTPError, OfflineModeIsEnabled

    folder = Path(folder).resolve()
    repo_id = check_repo_id(repo_id)
    parts = ["hf", "upload", repo_id, str(folder), ".", "--repo-type", "model"]
    parts += ["--private"] if private else []
    parts += ["--revision", revision] if revision else []
    parts += ["--create-pr"] if create_pr else []
    command = shlex.join(parts + (["--commit-message", commit_message] if commit_message else []))
    if dry_run:
        return command
    later = f"The staged repo is complete in {str(folder)!r}; publish it later with:\n  {command}"
    if constants.is_offline_mode():
        raise PublishError(f"HF_HUB_OFFLINE is set, so nothing was uploaded. {later}")
    token = token or get_token()
    if not token:
        raise PublishError(f"no Hugging Face token: set HF_TOKEN or run `hf auth login`. {later}")
    api = api or HfApi(endpoint=endpoint, token=token)
    message = commit_message or f"Upload {repo_id} with ctxir"
    try:
        api.create_repo(repo_id, private=private, exist_ok=True, repo_type="model")
        if revision and not create_pr:
            api.create_branch(repo_id, branch=revision, exist_ok=True, repo_type="model")
        info = api.upload_folder(
            repo_id=repo_id,
            folder_path=str(folder),
            repo_type="model",
            revision=revision,
            create_pr=create_pr,
            commit_message=message,
        )
    except Exception as err:  # the Hub's HTTP errors, and transport errors (httpx and the like)
        reason = str(err).replace(token, "hf_***")
        if isinstance(err, (HfHubHTTPError, OfflineModeIsEnabled, OSError)):
            raise PublishError(f"uploading to {repo_id!r} failed: {reason}. {later}") from None
        if not type(err).__module__.startswith(("httpx", "httpcore", "requests", "urllib3")):
            raise
        raise PublishError(f"the Hub is unreachable ({type(err).__name__}: {reason}). {later}") from None
    return getattr(info, "pr_url", None) or getattr(info, "commit_url", None) or str(info)


@dataclass
class PushArgs:
    model_dir: str = flag(help="training output (model files + metrics.json), or a `ctxir adapt` output")
    repo_id: str = flag(help="Hub id 'owner/name', e.g. ctxir/minilm-scifact-bi-encoder")
    staging_dir: str = flag("", "where to stage (default <model-dir>/../hub/<owner>--<name>)")
    base_model_id: str = flag("", "the card's base_model Hub id: needed where metrics.json names a folder")
    figures: list[str] = field(default_factory=list, metadata={"help": "extra figures (.png/.svg/.html)"})
    corpus_license: str = flag("", "`ctxir adapt` only (required): the corpus's license, e.g. cc-by-4.0")
    evaluation: str = flag("", "`ctxir adapt` folders only: its `ctxir evaluate --output` file, for the card")
    private: bool = flag(False, "create the repo private (ignored if it exists)")
    revision: str = flag("", "branch to push to (created if missing)")
    create_pr: bool = flag(False, "open a pull request instead of committing")
    commit_message: str = ""
    dry_run: bool = flag(False, "stage and validate only; print the hf upload command")


@dataclass
class ValidateArgs:
    folder: str = flag(help="a staged folder (or an `hf download --local-dir` folder)")


def _summary(report: StagedRepo) -> str:
    sizes = sum((report.folder / f).stat().st_size for f in report.files)
    lines = [
        f"staged {report.model_type} for {report.repo_id or '(validated folder)'} in {report.folder}",
        f"  {len(report.files)} files, {sizes / 1e6:.1f} MB: {', '.join(report.files)}",
        f"  card: license {report.license}, {report.eval_count} evaluation(s) from {METRICS_FILE}",
    ]
    if report.skipped:
        shown = report.skipped[:8] + [f"... {len(report.skipped) - 8} more"] * (len(report.skipped) > 8)
        lines.append(f"  left out (not part of the published model): {', '.join(shown)}")
    lines.append(
        "  validated: no pickle, card matches metrics.json, loads back"
        + (", every Python block of the card runs from the Hub cache offline" if report.repo_id else "")
    )
    return "\n".join(lines)


def run_push(args: PushArgs) -> int:
    """Stage, validate and (unless --dry-run) upload; 0 = done, 2 = refused (CtxirError), 3 = staged, not uploaded."""
    report = stage(
        args.model_dir,
        args.repo_id,
        args.staging_dir or None,
        args.base_model_id or None,
        args.figures,
        corpus_license=args.corpus_license or None,
        evaluation=args.evaluation or None,
    )
    print(_summary(report))
    options = {"revision": args.revision or None, "create_pr": args.create_pr, "dry_run": args.dry_run}
    try:
        url = push(
            report.folder, report.repo_id, args.private, commit_message=args.commit_message or None, **options
        )
    except PublishError as err:
        print(f"error: {err}", file=sys.stderr)
        return 3
    if args.dry_run:
        print(f"dry run: nothing uploaded. To publish:\n  {url}")
        return 0
    print(f"pushed: {url}\n  download: hf download {report.repo_id} --local-dir DIR")
    return 0


def main(argv: list[str] | None = None) -> int:
    """``ctxir hub push|validate --flags``."""
    commands = {
        "push": (PushArgs, run_push),
        "validate": (ValidateArgs, lambda args: print(_summary(validate(args.folder)))),
    }
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] not in commands:
        got = f"got {argv[0]!r}: " if argv else ""
        print(
            f"usage: ctxir hub {{push,validate}} --help ({got}give push or validate first)", file=sys.stderr
        )
        return 2
    return cli_main(*commands[argv[0]], argv[1:])


if __name__ == "__main__":
    sys.exit(main())
