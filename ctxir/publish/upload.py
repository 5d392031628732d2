"""Upload a staged, validated folder to the Hub as is (``push``), or print the ``hf upload`` command that would."""

from __future__ import annotations

import shlex
from pathlib import Path

from ctxir.publish.staging import check_repo_id
from ctxir.types import CtxirError


class PublishError(CtxirError):
    """The folder is staged and valid, but the upload did not happen; the message says how to finish it."""


def hf_upload_command(
    folder: str | Path,
    repo_id: str,
    private: bool = False,
    revision: str | None = None,
    create_pr: bool = False,
    commit_message: str | None = None,
) -> str:
    """The `hf upload` command that publishes ``folder`` the same way ``push`` does."""
    parts = ["hf", "upload", repo_id, str(folder), ".", "--repo-type", "model"]
    if private:
        parts.append("--private")
    if revision:
        parts += ["--revision", revision]
    if create_pr:
        parts.append("--create-pr")
    if commit_message:
        parts += ["--commit-message", commit_message]
    return shlex.join(parts)


def _redact(text: str, token: str | None) -> str:
    return text.replace(token, "hf_***") if token else text


# push takes `hf upload`'s arguments one to one (hf_upload_command's, whose printed command must do the same), plus
# HfApi's token/endpoint and a test stand-in: more than 8 parameters on purpose, each one the client's own option.
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
) -> str:
    """Upload a staged, validated folder; return the commit (or pull request) URL.

    ``token``: else ``huggingface_hub.get_token``; never printed. ``api``: a stand-in for ``HfApi`` (tests).
    """
    from huggingface_hub import HfApi, constants, get_token
    from huggingface_hub.errors import HfHubHTTPError, OfflineModeIsEnabled

    folder = Path(folder).resolve()
    repo_id = check_repo_id(repo_id)
    command = hf_upload_command(folder, repo_id, private, revision, create_pr, commit_message)
    later = f"The staged repo is complete in {str(folder)!r}; publish it later with:\n  {command}"
    if constants.is_offline_mode():
        raise PublishError(f"HF_HUB_OFFLINE is set, so nothing was uploaded. {later}")
    token = token or get_token()
    if not token:
        raise PublishError(
            f"no Hugging Face token: set HF_TOKEN or run `hf auth login`, then push again. {later}"
        )
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
    except (HfHubHTTPError, OfflineModeIsEnabled, OSError) as err:
        raise PublishError(f"uploading to {repo_id!r} failed: {_redact(str(err), token)}. {later}") from None
    except Exception as err:  # httpx transport errors and the like: same outcome for the user
        if not type(err).__module__.startswith(("httpx", "httpcore", "requests", "urllib3")):  # httpx2 too
            raise
        raise PublishError(
            f"the Hub could not be reached ({type(err).__name__}: {_redact(str(err), token)}). {later}"
        ) from None
    return getattr(info, "pr_url", None) or getattr(info, "commit_url", None) or str(info)
