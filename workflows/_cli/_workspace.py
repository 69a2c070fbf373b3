"""The commands that move a workspace: ``seed`` (a local folder or a template in, to one
sandbox or several), ``template`` (a folder packed once, for many seeds) and ``dump`` (out, to
a folder, a .tar.gz or a .tar, replaced only with ``--force``)."""

from __future__ import annotations

import argparse
import os
import shutil
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from klavis_archive import igzip_file
from workflows._dump._paths import check_destination, shown_path
from workflows._dump._staging import make_staging
from workflows._errors import InvalidInputError, KlavisError, LocalWriteError
from workflows._sandbox import LocalSandbox
from workflows._template import SeedTemplate

from ._output import EXIT_ERROR, EXIT_OK, Output, UsageError, files_text, progress_choice

# Archive formats a user may reasonably ask for and that `dump -o` does not write: refused by
# name before anything is sent rather than written as a folder called "x.zip". A .zip is not
# offered: it would be a re-encoding of every member (not the service's archive), and zip has no
# portable way to keep the workspace's symbolic links and modes.
_REFUSED_SUFFIXES = (".zip", ".7z", ".rar", ".tar.bz2", ".tbz2", ".tar.xz", ".txz", ".tar.zst")


def _digest_source(source: str) -> bool:
    """Whether ``seed``'s SOURCE names a template by digest rather than a folder."""
    return source.startswith("sha256:")


def cmd_seed(args: argparse.Namespace, ui: Output) -> int:
    """Seed each sandbox from a folder (several: packed once, as a template) or a template."""
    ids: list[str] = args.ids
    folder_options = args.ignore or args.no_gitignore or args.preserve_mtime
    if _digest_source(args.source) and folder_options:
        raise UsageError(
            "--ignore, --no-gitignore and --preserve-mtime apply to packing a folder; a "
            "template was packed with its own (klavis-sandbox template FOLDER ...)"
        )
    progress = progress_choice(args)
    if len(ids) == 1 and not _digest_source(args.source):
        sb = LocalSandbox.attach(ids[0], base_url=args.base_url, progress=progress)
        count = sb.seed_directory(
            args.source,
            ignore=args.ignore,
            gitignore=not args.no_gitignore,
            preserve_mtime=args.preserve_mtime,
        )
        if args.json:
            ui.json({"sandbox_id": sb.id, "files": count})
        ui.note(f"seeded {files_text(count)} into {sb.id}")
        return EXIT_OK
    if _digest_source(args.source):
        template = SeedTemplate.load(args.source)
    else:
        template = SeedTemplate.from_folder(
            args.source,
            ignore=args.ignore,
            gitignore=not args.no_gitignore,
            preserve_mtime=args.preserve_mtime,
            progress=progress,
        )
        ui.note(f"packed {files_text(template.files)} once: template {template.digest}")
    seeded: list[dict[str, Any]] = []
    failed = 0
    for sandbox_id in ids:
        try:
            sb = LocalSandbox.attach(sandbox_id, base_url=args.base_url, progress=progress)
            count = sb.seed(template)
        except KlavisError as exc:  # the others are still seeded; the status says one failed
            ui.problem(f"seed {sandbox_id}: {exc}")
            failed += 1
            continue
        seeded.append({"sandbox_id": sb.id, "files": count, "template": template.digest})
        ui.note(f"seeded {files_text(count)} into {sb.id}")
    if args.json and len(ids) > 1:
        ui.json(seeded)
    elif args.json and seeded:
        ui.json(seeded[0])
    return EXIT_ERROR if failed else EXIT_OK


def cmd_template(args: argparse.Namespace, ui: Output) -> int:
    """Pack a folder once into the template cache and print its digest."""
    template = SeedTemplate.from_folder(
        args.path,
        ignore=args.ignore,
        gitignore=not args.no_gitignore,
        preserve_mtime=args.preserve_mtime,
        progress=progress_choice(args),
    )
    record = {
        "digest": template.digest,
        "files": template.files,
        "size": template.size,
        "path": str(template.path),
    }
    if args.json:
        ui.json(record)
    else:
        ui.data(f"{template.digest}\n")
    ui.note(f"packed {files_text(template.files)} ({template.size:,} bytes) into {template.path}")
    return EXIT_OK


@dataclass(frozen=True)
class _DumpTarget:
    path: Path
    format: str  # "folder", "tar.gz" or "tar"
    replace: bool  # something is there and --force says to replace it


def _dump_target(output: str, force: bool) -> _DumpTarget:
    """What ``dump -o`` writes, checked before anything is sent."""
    path = check_destination(output, what="dump -o")
    lowered = path.name.lower()
    refused = next((s for s in _REFUSED_SUFFIXES if lowered.endswith(s)), None)
    if refused is not None:
        raise InvalidInputError(
            f"dump -o {output!r}: {refused} archives are not written; name a folder, a .tar.gz "
            "(or .tgz) file, or a .tar file"
        )
    if lowered.endswith((".tar.gz", ".tgz")):
        kind = "tar.gz"
    elif lowered.endswith(".tar"):
        kind = "tar"
    else:
        kind = "folder"
    if not os.path.lexists(path):
        return _DumpTarget(path, kind, replace=False)
    empty_folder = kind == "folder" and path.is_dir() and not path.is_symlink()
    if empty_folder and not any(path.iterdir()):
        return _DumpTarget(path, kind, replace=False)  # nothing there to lose
    if not force:
        if path.is_symlink():
            what = "a symlink"
        elif path.is_dir():
            what = "a folder that is not empty"
        else:
            what = "a file"
        raise InvalidInputError(
            f"dump -o {output!r}: it already exists ({what}); pass --force to replace it "
            "(its current contents are deleted, not merged), or name a new path"
        )
    here = Path.cwd().resolve()
    if not path.is_symlink() and (path.resolve() == here or path.resolve() in here.parents):
        raise InvalidInputError(
            f"dump -o {output!r} --force would replace the current folder (or one holding it); "
            "name a folder inside it, or run the command from elsewhere"
        )
    return _DumpTarget(path, kind, replace=True)


def _gunzip(source: Path, destination: Path, shown: Path) -> None:
    """Decompress ``source`` into ``destination``; a failed write (a full disk, EFBIG) raises
    LocalWriteError naming ``shown``."""
    with igzip_file(source, "rb") as gz:
        try:
            with destination.open("xb") as out:
                shutil.copyfileobj(gz, out, 1024 * 1024)
        except OSError as exc:
            if exc.errno is None:  # BadGzipFile: the archive is damaged, not the disk full
                raise
            path = os.fspath(shown)
            message = f"cannot write {shown_path(path)}: {exc.strerror or exc}; nothing was written"
            raise LocalWriteError(message, path=path, cause=exc) from exc


def _dump(sb: LocalSandbox, target: _DumpTarget, args: argparse.Namespace) -> None:
    progress = progress_choice(args)
    if target.format != "tar" and not target.replace:
        sb.dump_to(target.path, progress=progress, timeout=args.timeout)
        return
    # Written beside the destination, then renamed into place: the same file system, and a
    # failure anywhere leaves the destination as it was. The staging folder is dump_to's kind
    # (named for this process, locked): a later dump removes it if a kill left it behind.
    parent = target.path.absolute().parent
    parent.mkdir(parents=True, exist_ok=True)
    staged_in = make_staging(os.fspath(parent), folder=True)
    staging = Path(staged_in.path)
    try:
        staged = staging / ("dump" if target.format == "folder" else "dump.tar.gz")
        try:
            sb.dump_to(staged, progress=progress, timeout=args.timeout)
        except LocalWriteError as exc:  # it names the staging path: name the user's instead
            shown = shown_path(os.fspath(target.path))
            message = str(exc).replace(shown_path(os.fspath(staged)), shown)
            raise LocalWriteError(message, path=os.fspath(target.path), cause=exc) from exc
        if target.format == "tar":
            _gunzip(staged, staging / "dump.tar", target.path)
            staged = staging / "dump.tar"
        replaced = staging / "replaced"
        if os.path.lexists(target.path):
            os.replace(target.path, replaced)  # a link is moved, never followed
        try:
            os.replace(staged, target.path)
        except BaseException:
            if os.path.lexists(replaced):  # put the user's file back before cleaning up
                os.replace(replaced, target.path)
            raise
    finally:
        staged_in.remove()


def _dump_summary(sb: LocalSandbox, target: _DumpTarget) -> dict[str, Any]:
    summary: dict[str, Any] = {
        "sandbox_id": sb.id,
        "path": os.fspath(target.path),
        "format": target.format,
    }
    if target.format != "folder":
        summary["bytes"] = target.path.stat().st_size
        return summary
    files = links = size = 0
    for folder, dirs, names in os.walk(target.path):  # links to folders are listed, not walked
        for name in [*dirs, *names]:
            st = os.lstat(os.path.join(folder, name))
            if stat.S_ISLNK(st.st_mode):
                links += 1
            elif stat.S_ISREG(st.st_mode):
                files += 1
                size += st.st_size
    summary.update(files=files, links=links, bytes=size)
    return summary


def cmd_dump(args: argparse.Namespace, ui: Output) -> int:
    target = _dump_target(args.output, args.force)  # before anything is sent
    sb = LocalSandbox.attach(args.id, base_url=args.base_url, progress=progress_choice(args))
    _dump(sb, target, args)
    if args.json:
        ui.json(_dump_summary(sb, target))
    replaced = " (replacing what was there)" if target.replace else ""
    ui.note(f"dumped {sb.id} to {target.path}{replaced}")
    return EXIT_OK
