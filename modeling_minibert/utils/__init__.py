"""What every wing shares: safe writes (`files`), the output folder's names, results and lock (`outputs`), bf16
where it pays (`precision`), quiet transformers loading (`logging`), the command convention (`commands`), lazy
package faces (`lazy`), the CPUs a process may use (`cpus`) and what every teacher is checked for (`teachers`).

Imports nothing above the model files: every other wing builds on it.
"""
