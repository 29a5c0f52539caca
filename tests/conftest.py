"""Tests import the modules of src/ the way run.py does (`import dataset`, `import model`)."""
import os
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SRC = os.path.join(REPO, 'src')
if SRC not in sys.path:
    sys.path.insert(0, SRC)
RUN = os.path.join(REPO, 'src', 'run.py')

# Made-up people and places for tiny corpora and TSVs (the CLI tests train on these)
PEOPLE = [('Ada Brook', 'London'), ('Ben Carter', 'Paris'), ('Cleo Dunn', 'Berlin'),
          ('Dan Evans', 'Rome'), ('Eve Fox', 'Madrid'), ('Finn Gray', 'Dublin'),
          ('Gus Hale', 'Vienna'), ('Hana Ito', 'Tokyo'), ('Ivan Jones', 'Moscow'),
          ('Jude Kim', 'Seoul'), ('Kai Lowe', 'Oslo'), ('Lena Marx', 'Prague'),
          ('Milo Nash', 'Lisbon'), ('Nora Owen', 'Athens'), ('Otto Pike', 'Zurich'),
          ('Pia Quinn', 'Quebec'), ('Rex Stone', 'Cairo'), ('Sara Tate', 'Lima'),
          ('Tom Ueda', 'Kyoto'), ('Uma Vale', 'Delhi'), ('Vera Wolf', 'Warsaw'),
          ('Walt Xu', 'Beijing'), ('Yuri Zane', 'Kiev'), ('Zoe Abel', 'Geneva'),
          ('Amy Bell', 'Boston'), ('Bob Cole', 'Chicago'), ('Cy Dow', 'Denver'),
          ('Di Ely', 'Exeter'), ('Ed Ford', 'Florence'), ('Flo Gibb', 'Glasgow'),
          ('Gil Hart', 'Havana'), ('Hal Irwin', 'Istanbul')]
