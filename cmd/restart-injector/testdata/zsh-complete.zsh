# zsh-complete.zsh LINE SCRIPT OUT: type LINE and a Tab into an interactive
# zsh on a pseudo-terminal (zsh/zpty) that has sourced the completion
# SCRIPT, and append to OUT every candidate the completion system adds
# (compadd is wrapped to record them).
zmodload zsh/zpty
zpty z zsh -f -i
zpty -w z "PROMPT=''; autoload -U compinit; compinit -u -D; source ${(q)2}; exec 2>>${(q)3}.err"
zpty -w z 'compadd() { builtin compadd -O __hits "$@"; print -l -- $__hits >> '"${(q)3}"'; builtin compadd "$@" }'
zpty -w z "bindkey '^I' complete-word"
zpty -w z "print -r -- ready >> ${(q)3}.ready"
while [[ ! -s $3.ready ]]; do sleep 0.1; done
zpty -w -n z "$1"$'\t'
# The completion is done when the next command line has run. That line
# first sends the shell's errors elsewhere: once the pseudo-terminal is
# deleted below, the shell's next read fails (EIO) and it says so on its
# stderr, which is not an error of the completion.
zpty -w z $'\x15'"exec 2>/dev/null; print -r -- done >> ${(q)3}.done"
while [[ ! -s $3.done ]]; do sleep 0.1; done
zpty -d z
