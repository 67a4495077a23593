# bash completion for xprt's tools: mkshmcon (and rmshmcon), rtrs-client,
# rtrs-server, xprobe, ibcache-serve and ibcache-fetch.
#
# Subcommands, options and the values of options with fixed choices come
# from the tools' own --help, so they never drift from the binary being
# completed; mkshmcon's connection names come from `mkshmcon list`.
# Installed as /usr/share/bash-completion/completions/<tool> (one copy or
# link per tool), or sourced as it is.

# _xprt_help TOOL [CMD]: the usage text of TOOL, or of its command CMD.
_xprt_help()
{
	if [[ -n $2 ]]; then
		"$1" "$2" --help 2>/dev/null
	else
		"$1" --help 2>/dev/null
	fi
}

# _xprt_cmds TOOL: the commands its usage lists ("  TOOL CMD ...").
_xprt_cmds()
{
	_xprt_help "$1" | sed -n "s/^  ${1//-/\\-} \\([a-z][a-z-]*\\)\\( .*\\)\\{0,1\\}$/\\1/p"
}

# _xprt_opts TEXT: every -x and --long option named in TEXT.
_xprt_opts()
{
	grep -oE -- '(^|[][ ,|(])--?[a-zA-Z][a-zA-Z0-9-]*' <<<"$1" |
		sed -E 's/^[][ ,|(]//' | sort -u
}

# _xprt_choices TEXT OPT: the fixed values TEXT gives OPT ("OPT a|b|c").
_xprt_choices()
{
	grep -oE -- "(^|[][ ,])$2 [a-z0-9][a-z0-9-]*(\\|[a-z0-9][a-z0-9-]*)+" <<<"$1" |
		head -n 1 | sed -E 's/^[][ ,]?[^ ]+ //; s/\|/ /g'
}

_xprt()
{
	local cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD-1]}
	local tool=${COMP_WORDS[0]##*/} cmd="" verb="" text choices i w

	case $tool in
	rmshmcon) tool=mkshmcon cmd=rm ;;
	esac
	# the command: the first word that is one of the tool's
	case $tool in
	mkshmcon | rtrs-client | rtrs-server | xprobe | ibcache-serve)
		if [[ -z $cmd ]]; then
			for ((i = 1; i < COMP_CWORD; i++)); do
				w=${COMP_WORDS[i]}
				[[ $w == -* ]] && continue
				if _xprt_cmds "$tool" | grep -qx -- "$w"; then
					cmd=$w
					[[ $tool == rtrs-client && $cmd == path ]] &&
						verb=${COMP_WORDS[i + 1]}
				fi
				break
			done
		fi
		if [[ -z $cmd && $COMP_CWORD -eq 1 && $cur != -* ]]; then
			COMPREPLY=($(compgen -W "$(_xprt_cmds "$tool") help" -- "$cur"))
			return
		fi
		;;
	esac
	# rtrs-server and ibcache-serve serve without a command word
	if [[ -z $cmd && ($tool == rtrs-server || $tool == ibcache-serve) ]]; then
		text=$(_xprt_help "$tool")
	elif [[ -n $cmd ]]; then
		text=$(_xprt_help "$tool" "$cmd")
		# the session options of read, write and bench
		[[ $tool == rtrs-client && $cmd =~ ^(read|write|bench|set)$ ]] &&
			text+=$'\n'$(_xprt_help "$tool" | sed -n '/^Session options/,/^URI/p')
	else
		text=$(_xprt_help "$tool")
	fi
	# rtrs-client path VERB
	if [[ $tool == rtrs-client && $cmd == path && $prev == path ]]; then
		COMPREPLY=($(compgen -W "add remove disconnect reconnect" -- "$cur"))
		return
	fi
	# the value of an option
	if [[ $prev == -* ]]; then
		choices=$(_xprt_choices "$text" "$prev")
		if [[ -n $choices ]]; then
			COMPREPLY=($(compgen -W "$choices" -- "$cur"))
			return
		fi
		case $prev in
		-c | --config | --ctl | --peers | --origin | --local | -e | --dev-search-path)
			COMPREPLY=($(compgen -f -- "$cur"))
			return
			;;
		--cache)
			COMPREPLY=($(compgen -d -- "$cur"))
			return
			;;
		esac
		# a value we cannot guess (a number, a name, a URI)
		if grep -qE -- "(^|[][ ,|])$prev [A-Z]" <<<"$text"; then
			COMPREPLY=()
			return
		fi
	fi
	if [[ $cur == -* ]]; then
		COMPREPLY=($(compgen -W "$(_xprt_opts "$text") --help" -- "$cur"))
		return
	fi
	# operands: mkshmcon's connections
	if [[ $tool == mkshmcon && $cmd =~ ^(connect|status|rm)$ ]]; then
		COMPREPLY=($(compgen -W "$(mkshmcon list 2>/dev/null | awk 'NR > 1 { print $1 }')" \
			-- "$cur"))
		return
	fi
	COMPREPLY=($(compgen -f -- "$cur"))
}

complete -F _xprt mkshmcon rmshmcon rtrs-client rtrs-server xprobe ibcache-serve ibcache-fetch
