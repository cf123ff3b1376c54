"""Flow control (issue 37): what a workflow or a step declares (spec), its keys rendered
from a run's input (keys), and why a run waits (explain). Pure: stdlib and the leaves."""
