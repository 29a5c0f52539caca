"""Every dev accuracy the pages state recomputes from the predictions in results/ it cites: the
README's results table, the maintainers' GPU table, the students' CPU table, the CPU recipes'
page, each run folder's README and report, and the figures a loaded CPU run prints
(the cpu-20min preset's under_load setting). Scored as the handout scores them: a prediction is right
when it is the dev line's place, character for character. The times and counts the pages state
recompute from the records beside them (logs, run records, timings, reports). Also: results/
stays lean."""
import json
import os
import re
import statistics

import pytest

from support import REPO

RESULTS = os.path.join(REPO, 'results')
H200 = 'results/h200/b5d01ad-fp32-side-by-side'
H100 = 'results/h100-80gb-hbm3/27b5b3a/whole-bf16'
CPU = 'results/cpu-20min'
# the predictions file of each model, as run_all names them
FILES = {'vanilla-nopretrain': 'vanilla.nopretrain', 'vanilla': 'vanilla.pretrain',
         'synthesizer': 'synthesizer.pretrain', 'perceiver': 'perceiver.pretrain',
         'perceiver-starter': 'perceiver-starter.pretrain', 'rope': 'rope.pretrain'}
PERCENT = re.compile(r'(\d+\.\d)%')


def gold():
    path = os.path.join(REPO, 'data', 'birth_dev.tsv')
    if not os.path.exists(path):
        pytest.skip('data/birth_dev.tsv is not set up (bash scripts/setup.sh)')
    with open(path, encoding='utf-8') as f:
        return [line.rstrip('\n').split('\t')[1] for line in f]


def scored(folder, model):
    """(percent rounded as the pages write it, correct) of a model's dev predictions."""
    places = gold()
    if model == 'london':
        predictions = ['London'] * len(places)
    else:
        with open(os.path.join(REPO, folder, FILES[model] + '.dev.predictions'),
                  encoding='utf-8') as f:
            predictions = [line.rstrip('\n') for line in f]
    assert len(predictions) == len(places), f'{folder}: {model}: not one line per question'
    correct = sum(p == g for p, g in zip(predictions, places))
    return f'{100 * correct / len(places):.1f}', correct


def cpu_run(run):
    """The folder of cpu-20min's run `run` (a number)."""
    names = [n for n in os.listdir(os.path.join(REPO, CPU))
             if re.fullmatch(rf'run{run}(-[a-z-]+)?', n)]
    assert len(names) == 1, f'run {run}: {names}'
    return f'{CPU}/{names[0]}'


def read(page):
    with open(os.path.join(REPO, page), encoding='utf-8') as f:
        return f.read()


def table_rows(text, first_cell):
    """The cells of the markdown table rows whose first cell starts with `first_cell`."""
    return [[c.strip() for c in line.strip().strip('|').split('|')]
            for line in text.splitlines()
            if line.startswith('|') and line.strip('| ').startswith(first_cell)]


# the model named by the first cell of the GPU tables' rows (README, docs/maintainers.md)
ROWS = {'London baseline': 'london', 'vanilla, no pretraining': 'vanilla-nopretrain',
        'vanilla, pretrained': 'vanilla', 'synthesizer, pretrained': 'synthesizer',
        'rope (2024-25), pretrained': 'rope'}


def row_model(cell):
    if cell.startswith('perceiver'):
        return 'perceiver-starter' if '6e-3' in cell else 'perceiver'
    return ROWS.get(cell)


def check_gpu_table(page, columns):
    """Every row of the page's results table: each GPU column's figure (or '—') is its folder's."""
    rows = [r for r in table_rows(read(page), '') if row_model(r[0])]
    assert len(rows) == 7, f'{page}: the results table has {len(rows)} model rows, not 7'
    for row in rows:
        model = row_model(row[0])
        for index, folder in columns.items():
            cell = row[index]
            if cell == '—':
                continue
            assert PERCENT.fullmatch(cell.split(' ')[0]), f'{page}: {row[0]}: {cell!r}'
            assert cell.startswith(scored(folder, model)[0] + '%'), \
                f'{page}: {row[0]}: {cell} where {folder} gives {scored(folder, model)[0]}%'
    return rows


CPU_IDLE = (20, 25, 26)


def test_the_readmes_results_table_recomputes():
    rows = check_gpu_table('README.md', {1: H200, 2: H100})
    figures = sorted(float(scored(cpu_run(r), 'vanilla')[0]) for r in CPU_IDLE)
    cells = {row_model(r[0]): r[3] for r in rows}
    assert cells['vanilla'] == (f'{statistics.median(figures):.1f}% (median of 3: '
                                f'{figures[0]:.1f}–{figures[-1]:.1f}%)')
    assert cells['london'] == scored(H200, 'london')[0] + '%'
    assert 'runs 20, 25, 26' in read('README.md')


def test_the_maintainers_gpu_table_recomputes():
    check_gpu_table('docs/maintainers.md', {1: H200, 2: H100})
    fp32 = 'results/h100-80gb-hbm3/27b5b3a/vanilla-fp32'
    assert f'{scored(fp32, "vanilla")[0]}%: `{fp32.rsplit("/", 1)[0]}/`' in read('docs/maintainers.md')


def test_each_run_folders_own_page_recomputes():
    # the H200 run's README table: a row per model, its dev cell the second
    text = read(f'{H200}/README.md')
    names = {'London': 'london', 'vanilla, no pretraining': 'vanilla-nopretrain',
             'vanilla': 'vanilla', 'synthesizer': 'synthesizer', 'rope': 'rope',
             'perceiver, rate 6e-4 (the 2022-23 handout text)': 'perceiver',
             'perceiver, rate 6e-3 (the starter\'s `run_perceiver.sh`)': 'perceiver-starter'}
    rows = [r for r in table_rows(text, '') if r[0] in names]
    assert len(rows) == 7
    for row in rows:
        assert row[1] == scored(H200, names[row[0]])[0] + '%', row
    # the H100 run's README sentence: "Dev: London 5.0%, no pretraining 1.4%, vanilla 33.0%, ..."
    text = ' '.join(read('results/h100-80gb-hbm3/27b5b3a/README.md').split())
    for label, model in (('London', 'london'), ('no pretraining', 'vanilla-nopretrain'),
                         ('vanilla', 'vanilla'), ('synthesizer', 'synthesizer'),
                         ('perceiver', 'perceiver'), ('rope', 'rope')):
        assert f'{label} {scored(H100, model)[0]}%' in text, label
    fp32 = 'results/h100-80gb-hbm3/27b5b3a/vanilla-fp32'
    assert f'**{scored(fp32, "vanilla")[0]}%** dev' in text


def test_every_run_alls_report_in_results_recomputes():
    reports = []
    for root, _, files in os.walk(RESULTS):
        if 'report.md' in files and any(f.endswith('.dev.predictions') for f in files):
            reports.append(os.path.relpath(root, REPO))
    assert len(reports) >= 19  # the two GPU runs, vanilla in fp32, 16 cpu-20min runs
    for folder in reports:
        rows = [r for r in table_rows(read(f'{folder}/report.md'), '')
                if r[0] in FILES or r[0] == 'london']
        assert rows, folder
        for row in rows:
            percent, correct = scored(folder, row[0])
            assert row[1] == f'{percent}% ({correct}/500)', f'{folder}/report.md: {row[0]}'
        if os.path.exists(os.path.join(REPO, folder, 'report.json')):
            with open(os.path.join(REPO, folder, 'report.json'), encoding='utf-8') as f:
                for row in json.load(f)['models']:
                    if row['dev'] is not None:
                        assert row['dev']['correct'] == scored(folder, row['model'])[1], \
                            f'{folder}/report.json: {row["model"]}'


def cpu_table():
    """run number -> the dev cell of results/cpu-20min/README.md's table."""
    rows = table_rows(read(f'{CPU}/README.md'), '')
    return {int(r[0].split('-')[0]): r[-1] for r in rows if re.match(r'\d+', r[0])}


def test_the_cpu_runs_table_recomputes_run_by_run():
    table = cpu_table()
    assert sorted(table) == list(range(16, 32))
    for run, cell in table.items():
        percent, correct = scored(cpu_run(run), 'vanilla')
        assert cell.strip('*') == f'{percent}% ({correct}/500)', f'run {run}: {cell}'


def condition(run):
    """(load, layers) of a cpu-20min run, from its folder name and its pretraining record."""
    folder = cpu_run(run)
    load = folder.rsplit('/run', 1)[1].partition('-')[2] or 'idle'
    with open(os.path.join(REPO, folder, 'vanilla.pretrain.params.run.json'),
              encoding='utf-8') as f:
        return load, json.load(f)['n_layer']


def figures_of(runs):
    return [scored(cpu_run(r), 'vanilla')[0] + '%' for r in runs]


def test_the_students_cpu_table_and_the_recipe_page_recompute():
    text = read('docs/students.md')
    for label, runs in (('idle', (20, 25, 26)), ('light load', (16, 21, 27)),
                        ('heavy load', (19, 22, 28)), ('one core', (29, 30, 31))):
        row = table_rows(text, label)
        assert len(row) == 1, label
        values = figures_of(runs)
        median = statistics.median(float(v[:-1]) for v in values)
        assert row[0][-1] == f'{", ".join(values)} (**{median:.1f}%**)', (label, row[0][-1])
    recipe = ' '.join(read('docs/cpu-recipe.md').split())
    by_condition = {}
    for run in range(16, 32):
        by_condition.setdefault(condition(run), []).append(run)
    idle, light, heavy = by_condition[('idle', 4)], by_condition[('light', 4)], \
        sorted(by_condition.get(('heavy', 2), []) + by_condition.get(('heavy', 4), []))
    one_core_2 = by_condition[('one-core', 2)]
    one_core_4 = by_condition[('one-core', 4)]
    for runs in (idle, light, heavy, one_core_2, one_core_4):
        values = figures_of(runs)
        stated = ', '.join(values[:-1]) + ' and ' + values[-1]
        assert stated in recipe, stated


def test_what_a_loaded_run_prints_recomputes_from_its_runs():
    """cpu-20min's under_load setting (what a loaded run names at its end) is its runs' figures."""
    from engine import presets
    stated = presets.under_load('cpu-20min')['runs']
    groups = {'idle': [], 'beside the light load': [],
              'with one core (beside the heavy load, or taskset)': [],
              'with one core, the 4 layers kept': []}
    for run in range(16, 32):
        load, layers = condition(run)
        if load == 'idle':
            groups['idle'].append(run)
        elif load == 'light':
            groups['beside the light load'].append(run)
        elif layers == 2:
            groups['with one core (beside the heavy load, or taskset)'].append(run)
        else:
            groups['with one core, the 4 layers kept'].append(run)
    assert set(stated) == set(groups)
    students = ' '.join(read('docs/students.md').split())
    for name, runs in groups.items():
        values = sorted(float(v[:-1]) for v in figures_of(runs))
        assert stated[name]['dev'] == f'{values[0]:.1f}-{values[-1]:.1f}% ({len(runs)} runs)', name
        steps = sorted(record(cpu_run(r), 'vanilla.pretrain.params.run.json')['steps'] for r in runs)
        assert stated[name]['steps'] == (steps[0], steps[-1]), name
        assert {condition(r)[1] for r in runs} == {stated[name]['layers']}, name
        if name.startswith('with one core'):  # the students' page says the same of them
            assert f'{values[0]:.1f}-{values[-1]:.1f}% in {WORDS[len(runs)]}' in students, name


WORDS = {4: 'four', 6: 'six'}


def test_the_results_indexs_headlines_are_their_folders_figures():
    """Each accuracy in results/README.md's headline column is one its folder's predictions give."""
    folders = {'h200/': [H200], 'h100-80gb-hbm3/': [H100, 'results/h100-80gb-hbm3/27b5b3a/vanilla-fp32'],
               'cpu-20min/': [cpu_run(r) for r in range(16, 32)]}
    rows = table_rows(read('results/README.md'), '`')
    checked = 0
    for row in rows:
        folder = next((v for k, v in folders.items() if row[0].startswith(f'`{k}')), None)
        if folder is None:
            continue
        given = {scored(f, m)[0] for f in folder for m in FILES
                 if os.path.exists(os.path.join(REPO, f, FILES[m] + '.dev.predictions'))}
        for figure in PERCENT.findall(row[-1]):
            assert figure in given, f'results/README.md: {row[0]}: {figure}%'
            checked += 1
    assert checked >= 10


def record(folder, name):
    with open(os.path.join(REPO, folder, name), encoding='utf-8') as f:
        return json.load(f)


def cpu_wall(run):
    """A cpu-20min run's wall seconds: the last line of its main.log ('rc 0 wall 1181 s')."""
    last = read(f'{cpu_run(run)}/main.log').strip().splitlines()[-1]
    return int(re.fullmatch(r'rc 0 wall (\d+) s', last).group(1))


def test_the_cpu_runs_wall_times_and_steps_are_their_records():
    rows = {int(r[0].split('-')[0]): r for r in table_rows(read(f'{CPU}/README.md'), '')
            if re.match(r'\d+', r[0])}
    for run, row in rows.items():
        wall = cpu_wall(run)
        assert row[3].strip('*') == f'{wall // 60} min {wall % 60} s', f'run {run}: {row[3]}'
        steps = record(cpu_run(run), 'vanilla.pretrain.params.run.json')['steps']
        assert f'{steps:,} steps' in row[2], f'run {run}: {row[2]}'
    walls = [cpu_wall(r) for r in rows]
    low, high = min(walls), max(walls)
    stated = f'{low // 60}:{low % 60:02d} to {high // 60}:{high % 60:02d} minutes each'
    assert stated in ' '.join(read('docs/cpu-recipe.md').split()), stated
    # the students' page: what a light load cost against the idle runs' median
    steps = {r: record(cpu_run(r), 'vanilla.pretrain.params.run.json')['steps'] for r in rows}
    idle = statistics.median(steps[r] for r in CPU_IDLE)
    lost = sorted(round(100 * (1 - steps[r] / idle)) for r in (16, 21, 27))
    assert (f'a light load cost {lost[0]}\u2013{lost[-1]}% of them (against the idle runs\' '
            f'median of {idle:,})') in ' '.join(read('docs/students.md').split())
    idle_walls = [cpu_wall(r) for r in CPU_IDLE]
    assert (f'{min(idle_walls) // 60}:{min(idle_walls) % 60}\u2013{max(idle_walls) // 60}:'
            f'{max(idle_walls) % 60} minutes each') in ' '.join(read('README.md').split())


def test_the_gpu_runs_times_are_their_records():
    side = record(H200, 'report.json')
    first = record(H200, 'timings-first-call.json')
    second = side['wall_seconds']
    before = max(v['pretrain so far'] for v in first.values() if 'pretrain so far' in v)
    at_least = int(before + second)
    for page in ('README.md', 'docs/gpu.md', 'docs/maintainers.md', 'results/README.md',
                 f'{H200}/README.md'):
        text = ' '.join(read(page).split())
        assert f'at least {at_least} s' in text or f'at least **{at_least} s**' in text, page
        assert '702 s' not in text, page
    assert f'{second:.1f} s' in read(f'{H200}/README.md')
    assert f'{before:.1f} s' in read('docs/gpu.md')
    timings = record(H200, 'timings.json')
    for row in table_rows(read(f'{H200}/README.md'), ''):
        model = {'vanilla': 'vanilla', 'synthesizer': 'synthesizer', 'rope': 'rope',
                 'perceiver, rate 6e-4 (the 2022-23 handout text)': 'perceiver'}.get(row[0])
        if model:
            assert row[3] == str(round(timings[model]['pretrain'])), row
    assert f'`--side_by_side {side["side_by_side"]}`' in read(f'{H200}/README.md')
    fp32 = 'results/h100-80gb-hbm3/27b5b3a/vanilla-fp32'
    stages = sum(sum(m['seconds'].values()) for m in record(fp32, 'report.json')['models'])
    for page in ('docs/gpu.md', 'docs/maintainers.md', 'results/README.md',
                 'results/h100-80gb-hbm3/27b5b3a/README.md'):
        text = read(page)
        assert f'{stages:.1f} s' in text, page
        assert '182 s' not in text, page


def test_the_grading_time_is_the_sandboxed_graders_record():
    times = [float(t) for line in read('results/grading.md').split('## Earlier the same day, before')[0]
             .splitlines() if 'grading one complete submission took' in line
             for t in re.findall(r'\d+\.\d', line.split('took')[1].split('(')[0])]
    assert len(times) == 12
    stated = f'{min(times)}-{max(times)} s per submission'
    assert stated in read('results/README.md')
    assert stated.replace('-', '\u2013').replace(' per submission', '') in \
        ' '.join(read('scripts/grading/README.md').split())


def test_results_holds_at_most_250_files():
    count = sum(len(files) for _, _, files in os.walk(RESULTS))
    assert count <= 250, f'results/ holds {count} files: keep the runs a page cites'
