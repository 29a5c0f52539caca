"""Opening a stranger's submission, for grade.py: a zip or a folder, copied into a folder the
grader owns, or refused with one reason. Standard library only.

Refused: a file that is not a readable zip, entries whose names leave the folder ('..', absolute
paths, drive letters), symbolic links and other non-regular files, more entries, more bytes,
deeper folders or longer names than any real submission has (a zip bomb: counted while
inflating, whatever the zip declares), and a name that appears twice. An entry whose name is too
long for a file system is left out, alone, with a warning; a folder's hard link to the grader's
own data or held-out answers is refused. Names in the reasons are escaped
(repr) and cut short: a crafted name cannot forge a line of the report.
"""
import errno
import os
import re
import stat
import zipfile
import zlib

MAX_BYTES = 512 << 20  # a complete submission is about 70 MB (four params files and wiki.txt)
MAX_FILES = 5000
MAX_DEPTH = 32  # folders inside one another (a submission has 3: folder/src/__pycache__)
MAX_NAME = 512  # characters in an entry's path
NAME_BYTES = 255  # bytes in one part of a path: what Linux's file systems take (NAME_MAX)


class Refused(Exception):
    """Why a submission cannot be opened, in one line."""


def identities(paths):
    """{(device, inode)} of the files `paths` (None and missing ones left out)."""
    found = set()
    for p in paths:
        try:
            st = os.stat(p)
        except (OSError, TypeError):
            continue
        found.add((st.st_dev, st.st_ino))
    return found


def unpack(path, dest, skipped=None, protected=()):
    """Copy the submission at `path` (a zip or a folder) into the new folder `dest`; returns the
    folder to grade: `dest`, or the one folder it holds when the submission was zipped or copied
    with its enclosing folder. A zip entry whose name no file system takes (a part of it over
    NAME_BYTES bytes, or the whole over MAX_NAME characters) costs that entry only: it is left
    out, and `skipped` (a list) gets a line saying so. A folder's file that is a hard link to
    one of `protected` ({(device, inode)}: the grader's held-out answers and data) is refused."""
    if os.path.isdir(path):
        _copy_folder(path, dest, protected)
    else:
        _extract_zip(path, dest, [] if skipped is None else skipped)
    root = dest
    for _ in range(2):
        entries = [e for e in os.listdir(root) if e != '__MACOSX']
        if len(entries) != 1 or not os.path.isdir(os.path.join(root, entries[0])) \
                or entries[0] == 'src':
            break
        root = os.path.join(root, entries[0])
    return root


def shown(name, n=80):
    """A stranger's file name for a message: escaped, and cut to about n characters."""
    text = repr(name)
    return text if len(text) <= n else text[:n - 5] + '...' + text[-2:]


def _entry_problem(name):
    parts = name.replace('\\', '/').split('/')
    if name.startswith(('/', '\\')) or re.match(r'^[A-Za-z]:', name) or '..' in parts:
        return f'entry {shown(name)} points outside the submission'
    if '\0' in name:
        return f'entry {shown(name)} has a NUL in its name'
    if len(parts) > MAX_DEPTH:
        return (f'entry {shown(name)} is {len(parts) - 1} folders deep: beyond any submission '
                f'(at most {MAX_DEPTH} folders)')
    return None


def _name_too_long(name):
    parts = name.replace('\\', '/').split('/')
    return len(name) > MAX_NAME or any(len(p.encode('utf-8', 'surrogateescape')) > NAME_BYTES
                                       for p in parts)


def _extract_zip(path, dest, skipped):
    try:
        z = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, ValueError, EOFError) as e:
        raise Refused(f'not a readable zip file ({type(e).__name__}: {e})')
    with z:
        infos = z.infolist()
        if len(infos) > MAX_FILES:
            raise Refused(f'{len(infos)} entries in the zip, more than the {MAX_FILES} any '
                          'submission needs')
        declared = sum(i.file_size for i in infos)
        if declared > MAX_BYTES:
            raise Refused(f'the zip unpacks to {declared / 2**20:,.0f} MiB, far beyond a '
                          f'submission (limit {MAX_BYTES >> 20} MiB): refused unopened')
        names = set()
        for info in infos:
            problem = _entry_problem(info.filename)
            key = info.filename.replace('\\', '/').rstrip('/')
            if problem is None and key in names:
                problem = f'entry {shown(info.filename)} appears twice in the zip'
            names.add(key)
            kind = stat.S_IFMT(info.external_attr >> 16)
            if problem is None and kind == stat.S_IFLNK:
                problem = f'entry {shown(info.filename)} is a symbolic link'
            elif problem is None and kind not in (0, stat.S_IFREG, stat.S_IFDIR):
                problem = f'entry {shown(info.filename)} is not a regular file'
            if problem is not None:
                raise Refused(problem)
        os.makedirs(dest)
        written = 0
        for info in infos:
            if _name_too_long(info.filename):
                skipped.append(f'zip entry {shown(info.filename)} left out: its name is longer than '
                               f'a file system takes ({NAME_BYTES} bytes a part, {MAX_NAME} '
                               'characters in all)')
                continue
            target = os.path.join(dest, *info.filename.replace('\\', '/').split('/'))
            try:
                if info.is_dir():
                    os.makedirs(target, exist_ok=True)
                    continue
                os.makedirs(os.path.dirname(target), exist_ok=True)
                with z.open(info) as src, open(target, 'wb') as out:
                    for chunk in iter(lambda: src.read(1 << 20), b''):
                        written += len(chunk)
                        if written > MAX_BYTES:  # more than declared: stop inflating
                            raise Refused(f'the zip inflates beyond {MAX_BYTES >> 20} MiB, '
                                          'far beyond a submission')
                        out.write(chunk)
            except (zipfile.BadZipFile, zlib.error, EOFError, RuntimeError,
                    NotImplementedError, OSError) as e:
                raise Refused(f'corrupt zip: entry {shown(info.filename)} cannot be read '
                              f'({type(e).__name__}: {str(e)[:200]!r})')


def _copy_folder(path, dest, protected=()):
    """Copy the folder `path` into the new folder `dest`, walking it by descriptors: each entry
    is opened without following a link (O_NOFOLLOW) and judged by what was opened (fstat), so
    that a file swapped for a link, or a folder for a link to elsewhere, after it was listed is
    refused, never copied or followed."""
    os.makedirs(dest)
    try:
        top = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError as e:
        raise Refused(f'the folder cannot be opened ({e.strerror})')
    seen = {'files': 0, 'bytes': 0}
    try:
        _copy_below(top, dest, '', protected, seen)
    finally:
        os.close(top)


def _open_entry(folder_fd, name, where):
    """A descriptor of `name` in `folder_fd`, never through a link, and its fstat (what is not
    a folder or a regular file when listed is refused unopened: opening a device may act)."""
    try:
        listed = os.stat(name, dir_fd=folder_fd, follow_symlinks=False)
    except OSError as e:
        raise Refused(f'{where} cannot be read ({e.strerror})')
    if stat.S_ISLNK(listed.st_mode):
        raise Refused(f'{where} is a symbolic link')
    if not (stat.S_ISDIR(listed.st_mode) or stat.S_ISREG(listed.st_mode)):
        raise Refused(f'{where} is not a regular file')
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY,
                     dir_fd=folder_fd)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise Refused(f'{where} is a symbolic link')
        raise Refused(f'{where} cannot be opened ({e.strerror})')
    return fd, os.fstat(fd)


def too_large():
    return Refused(f'the folder holds more than {MAX_FILES} files or {MAX_BYTES >> 20} MiB, far '
                   'beyond a submission')


def _copy_below(folder_fd, dest, rel, protected, seen):
    if rel.count(os.sep) + 1 > MAX_DEPTH or len(rel) > MAX_NAME:
        raise Refused(f'{shown(rel)} is more than {MAX_DEPTH} folders deep or {MAX_NAME} '
                      'characters long: beyond any submission')
    os.makedirs(os.path.join(dest, rel), exist_ok=True)
    with os.scandir(folder_fd) as entries:
        names = sorted(e.name for e in entries)
    for name in names:
        where = shown(os.path.join(rel, name))
        fd, st = _open_entry(folder_fd, name, where)
        try:
            if stat.S_ISDIR(st.st_mode):
                _copy_below(fd, dest, os.path.join(rel, name), protected, seen)
                continue
            if not stat.S_ISREG(st.st_mode):
                raise Refused(f'{where} is not a regular file')
            if st.st_nlink > 1 and (st.st_dev, st.st_ino) in protected:
                raise Refused(f'{where} is a hard link to a file the grader keeps from '
                              'submissions (its data or held-out answers)')
            seen['files'] += 1
            if seen['files'] > MAX_FILES:
                raise too_large()
            with open(os.path.join(dest, rel, name), 'xb') as out:
                for chunk in iter(lambda: os.read(fd, 1 << 20), b''):
                    seen['bytes'] += len(chunk)  # (what is read: a file may grow meanwhile)
                    if seen['bytes'] > MAX_BYTES:
                        raise too_large()
                    out.write(chunk)
        finally:
            os.close(fd)
