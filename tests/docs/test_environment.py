"""environment.yml (conda) parses and names the same packages, with the same version ranges, as
requirements.txt + requirements-test.txt. A small line-based parser reads it, so the tests need no
pyyaml (on this file it gives what yaml.safe_load gives)."""
import os
import re

import pytest

from support import REPO
ENV_YML = os.path.join(REPO, 'environment.yml')
REQUIREMENTS = [os.path.join(REPO, 'requirements.txt'), os.path.join(REPO, 'requirements-test.txt')]
CONDA_TO_PIP = {'pytorch': 'torch', 'matplotlib-base': 'matplotlib'}  # conda-forge names unlike PyPI's
NOT_PACKAGES = {'python', 'pip'}      # the interpreter and the installer, not requirements


def parse_env_yml(text):
    """The subset of YAML an environment.yml uses: top-level `key: value` and `key:` followed by
    `  - item` lists, one level of `- pip:` sub-list. Comments and blank lines are skipped."""
    doc, key, sub = {}, None, None
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = re.sub(r'\s+#.*$', '', raw) if not raw.lstrip().startswith('#') else ''
        if not line.strip():
            continue
        indent = len(line) - len(line.lstrip(' '))
        body = line.strip()
        if '\t' in line[:indent + 1]:
            raise ValueError(f'line {lineno}: tab in indentation')
        if indent == 0:
            m = re.fullmatch(r'([A-Za-z_][\w-]*):\s*(.*)', body)
            if not m:
                raise ValueError(f'line {lineno}: expected `key:` or `key: value`: {raw!r}')
            key, value = m.group(1), m.group(2)
            if key in doc:
                raise ValueError(f'line {lineno}: duplicate key {key}')
            doc[key] = value if value else []
            sub = None
            continue
        if key is None or not isinstance(doc[key], list) or not body.startswith('- '):
            raise ValueError(f'line {lineno}: unexpected {raw!r}')
        item = body[2:].strip()
        if sub is not None and indent > sub[0]:
            sub[1].append(item)
            continue
        sub = None
        m = re.fullmatch(r'([\w-]+):', item)
        if m:  # `- pip:` opens a sub-list
            nested = []
            doc[key].append({m.group(1): nested})
            sub = (indent, nested)
        else:
            doc[key].append(item)
    return doc


def split_spec(spec):
    """'tqdm>=4.60' -> ('tqdm', '>=4.60'); names normalised as pip does."""
    m = re.fullmatch(r'([A-Za-z0-9][A-Za-z0-9._-]*)\s*(.*)', spec.strip())
    assert m, f'not a requirement: {spec!r}'
    return re.sub(r'[-_.]+', '-', m.group(1)).lower(), m.group(2).replace(' ', '')


def pip_requirements():
    reqs = {}
    for path in REQUIREMENTS:
        for line in open(path, encoding='utf-8'):
            line = line.split('#', 1)[0].strip()
            if line:
                name, spec = split_spec(line)
                assert name not in reqs, f'{name} listed twice'
                reqs[name] = spec
    return reqs


@pytest.fixture(scope='module')
def env():
    return parse_env_yml(open(ENV_YML, encoding='utf-8').read())


def conda_requirements(env):
    reqs = {}
    for dep in env['dependencies']:
        if isinstance(dep, dict):  # a `- pip:` list holds PyPI names already
            for spec in dep.get('pip', []):
                name, version = split_spec(spec)
                reqs[name] = version
            continue
        name, version = split_spec(dep)
        if name in NOT_PACKAGES:
            continue
        assert name not in reqs, f'{name} listed twice'
        reqs[CONDA_TO_PIP.get(name, name)] = version
    return reqs


def test_parses_with_name_channels_python(env):
    assert set(env) == {'name', 'channels', 'dependencies'}
    assert env['name'] and isinstance(env['name'], str)
    assert 'conda-forge' in env['channels']
    assert 'python=3.11' in env['dependencies']


def test_same_packages_and_ranges_as_pip(env):
    pip = pip_requirements()
    assert {'torch', 'tqdm', 'tensorboard', 'pytest'} <= set(pip)  # the parser read the files
    assert conda_requirements(env) == pip


def test_parser_rejects_malformed():
    with pytest.raises(ValueError):
        parse_env_yml('dependencies:\nnot a list item\n  - x\n')
    with pytest.raises(ValueError):
        parse_env_yml('dependencies:\n  tqdm\n')
    doc = parse_env_yml('name: x  # c\ndependencies:\n  - a>=1\n  - pip:\n    - b==2\n  - c\n')
    assert doc == {'name': 'x', 'dependencies': ['a>=1', {'pip': ['b==2']}, 'c']}

