# Shared by scripts/sass.sh and scripts/sass-table.sh (sourced, not run).
# sass_section SASS KERNEL: one kernel's section of an nvdisasm listing,
# from its .text label to the next kernel's .global.
sass_section() { awk -v k=".text.$2:" '$1 == k {on = 1; next} on && $1 == ".global" {on = 0} on' "$1"; }
# sass_ops: the opcodes (predicates and modifiers dropped) of SASS on stdin.
sass_ops() { grep -oE '^\s+/\*[0-9a-f]+\*/\s+(@!?U?P[0-9T] )?[A-Z0-9_.]+' | awk '{print $NF}' | sed 's/\..*//'; }
