from ._scurry import *
