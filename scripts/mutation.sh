#!/usr/bin/env bash
# Mutation testing of the modules whose tests are fast (docs/mutation.md).
#
# Runs mutmut (pinned in pyproject.toml's `dev` extra) over each module in turn, with
# only that module's in-process tests, in a copy of the tree under a temp dir (the
# working tree is never touched, so it is safe while tests run there). Prints every
# surviving mutant with its diff, then killed / total per module.
#
#   scripts/mutation.sh                 every module
#   scripts/mutation.sh cc recp         only these (names as in MODULES below)
#   MUTATION_JOBS=4 scripts/mutation.sh parallel test processes (default 2)
#   MUTATION_KEEP=1 scripts/mutation.sh keep the temp dir (to `mutmut show` / `browse`)
#
# Not part of the default test command: it takes minutes, not seconds.
set -euo pipefail

ROOT=$(git -C "$(dirname "$0")" rev-parse --show-toplevel)
JOBS=${MUTATION_JOBS:-2}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/mbds-mutation.XXXXXX")
if [[ -n "${MUTATION_KEEP:-}" ]]; then
  echo "work dir kept: $WORK"
else
  trap 'rm -rf "$WORK"' EXIT
fi

# The ABDL tests. A surviving or looping mutant runs every test that reaches it, with a
# timeout of 15 times their duration: for the parser the property-based tests (seconds
# each, tests/test_abdl_properties.py) are left out, or the run takes hours; for the
# lexer only the slowest two of them.
D="--deselect tests/test_abdl_properties.py::test_"
ABDL_PARSER_TESTS="tests/test_abdl_parser.py tests/test_abdl_errors.py"
ABDL_LEXER_TESTS="$ABDL_PARSER_TESTS tests/test_abdl_properties.py \
${D}mutated_requests_only_raise_syntax_errors ${D}token_soup_only_raises_syntax_errors"

# name | files mutated (a mutmut glob) | mutant names run (mutmut globs; a file's other
# functions are out of scope) | tests and pytest options (tests/test_mutants_<name>.py
# added if present)
MODULES=(
  "cc|backend/cc.py|backend.cc.*|tests/test_cc.py"
  "dm|backend/dm.py|backend.dm.*|tests/test_cc.py"
  "directory|mbds/directory.py mbds/descriptors.py|mbds.directory.* mbds.descriptors.*|tests/test_directory.py"
  "iig|controller/iig*.py|controller.iig.* controller.iig_batch.*|tests/test_directory.py \
tests/test_bulk_load.py::test_placement_per_batch_matches_the_per_record_rule \
tests/test_bulk_load.py::test_the_backend_checks_a_batch_per_column"
  "pp|controller/pp.py controller/aggregates.py|controller.aggregates.* \
controller.pp.x__side__* controller.pp.x__dumps__* \
controller.pp.x__joined__* controller.pp.xǁ_Joinǁ* controller.pp.x__encoded_batches__* \
controller.pp.x__batch__*|"
  "recp|backend/recp_*.py|backend.recp_sql.x_condition__* backend.recp_sql.x_where__* \
backend.recp_read.x__select_list__* backend.recp_groups.x_aggregate_groups__* \
backend.recp_write.x__modifier_sql__* backend.recp_write.x_delete__* \
backend.recp_write.x_update__* backend.recp_write.x_update_moving__* \
backend.recp_write.x_insert__*|tests/test_recp.py"
  "plancache|backend/plancache.py|backend.plancache.*|tests/test_plan_cache.py \
--deselect tests/test_plan_cache.py::test_repeated_requests_see_every_new_cluster_through_the_real_system"
  "exchange|backend/exchange.py|backend.exchange.*|tests/test_stages.py tests/test_exchange.py"
  "undo|backend/undo.py|backend.undo.*|tests/test_commit_parts.py tests/test_recp.py \
tests/test_rowids.py \
--deselect tests/test_rowids.py::test_an_aborted_delete_does_not_overwrite_an_insert_made_meanwhile \
tests/test_decision_log.py::test_a_backend_keeps_the_highest_seq_it_committed_of_its_latest_epochs \
tests/test_decision_log.py::test_a_file_made_before_one_phase_seqs_were_kept_is_upgraded"
  "check|backend/check.py|backend.check.*|tests/test_exchange.py tests/test_stages.py \
tests/test_plan_cache.py tests/test_mutants_exchange.py tests/test_stale_peer_ids.py \
--deselect tests/test_plan_cache.py::test_repeated_requests_see_every_new_cluster_through_the_real_system \
tests/test_bulk_load.py::test_the_backend_checks_a_batch_per_column \
tests/test_bulk_load.py::test_the_backend_names_a_bad_record_of_a_split_batch_by_its_share \
tests/test_bulk_load.py::test_the_backend_stores_every_column_kind_as_sent"
  "reply_order|controller/reply_order.py|controller.reply_order.*|\
tests/test_controller_checks.py::test_replies_ahead_of_the_others_are_kept_for_their_turn \
tests/test_controller_checks.py::test_a_definition_votes_then_commits_and_a_vote_may_be_rolled_back \
tests/test_controller_checks.py::test_credit_returned_lets_a_backend_send_on \
tests/test_controller_checks.py::test_a_reply_out_of_its_backends_order_fails_the_unit_at_once \
tests/test_controller_checks.py::test_replies_of_a_unit_with_no_requests_are_named_so \
tests/test_controller_checks.py::test_a_backends_error_fails_the_unit_in_its_own_words_at_any_point \
tests/test_controller_checks.py::test_the_credit_returned_is_named_when_a_backend_sends_past_it \
tests/test_controller_checks.py::test_a_refused_backend_is_heard_no_more_but_for_its_rollback \
tests/test_controller_checks.py::test_an_abort_too_late_for_a_one_phase_writer_is_told \
tests/test_controller_checks.py::test_a_bus_breaking_after_its_last_reply_fails_a_unit_others_have_not_begun \
tests/test_controller_checks.py::test_a_bus_closing_after_its_last_reply_fails_nothing_it_cannot_hold_up"
  "metrics|mbds/metrics.py|mbds.metrics.*|\
tests/test_fixed_cost.py::test_light_metrics_expose_what_prometheus_clients_own_would \
tests/test_fixed_cost.py::test_a_metric_child_is_made_once_and_counts_where_labels_would \
tests/test_fixed_cost.py::test_interleaved_handler_timings_each_count_once \
tests/test_fixed_cost.py::test_light_children_add_up_and_are_made_once_per_label_set \
tests/test_fixed_cost.py::test_a_handler_measured_by_its_caller_is_recorded_only_while_timing_is_on"
  "decisions|controller/decisions.py controller/epochs.py controller/carried.py|\
controller.decisions.* controller.epochs.* controller.carried.*|tests/test_decision_log.py"
  "abdl_lexer|controller/abdl/lexer.py|controller.abdl.lexer.*|$ABDL_LEXER_TESTS"
  "abdl_parser|controller/abdl/*parser.py|controller.abdl.parser.* \
controller.abdl.query_parser.*|$ABDL_PARSER_TESTS"
)

# Hypothesis: derandomized and without an example database, so a run's result does not
# depend on the order the mutants happened to run in.
PLUGIN='from hypothesis import settings
settings.register_profile("mutation", database=None, derandomize=True)
settings.load_profile("mutation")'

copy_tree() {  # the tracked and untracked (not ignored) files mutmut needs, as they are now
  (cd "$ROOT" && git ls-files -z -co --exclude-standard -- \
      mbds controller backend loadgen tests pyproject.toml \
    | tar --null --ignore-failed-read -T - -cf - 2>/dev/null) | tar -xf - -C "$1"
}

SUMMARY=()
selected=("$@")
start=$SECONDS
for entry in "${MODULES[@]}"; do
  IFS='|' read -r name file patterns tests <<<"$entry"
  if (( ${#selected[@]} )) && [[ ! " ${selected[*]} " == *" $name "* ]]; then
    continue
  fi
  [[ -f "$ROOT/tests/test_mutants_$name.py" ]] && tests="$tests tests/test_mutants_$name.py"
  if [[ -z "${tests// /}" ]]; then
    echo "=== $name: no fast tests, skipped" >&2
    SUMMARY+=("$(printf '%-12s %-26s %s' "$name" "$file" "no fast tests: not run")")
    continue
  fi
  dir="$WORK/$name"
  mkdir -p "$dir"
  copy_tree "$dir"
  printf '%s\n' "$PLUGIN" >"$dir/mutation_hypothesis.py"
  {
    echo "[mutmut]"
    printf 'source_paths =\n  mbds\n  controller\n  backend\n'
    echo "only_mutate ="
    (set -f; printf '  %s\n' $file)     # one glob or several, each on a line
    echo "also_copy = mutation_hypothesis.py"
    echo "pytest_add_cli_args_test_selection ="
    for t in $tests; do echo "  $t"; done
    printf 'pytest_add_cli_args =\n  -p\n  mutation_hypothesis\n  -p\n  no:cacheprovider\n'
    echo "use_git_change_detection = false"
  } >"$dir/setup.cfg"
  echo "=== $name: $file (tests: $tests)"
  t0=$SECONDS
  # shellcheck disable=SC2086  # the patterns are globs for mutmut, not for the shell
  (cd "$dir" && set -f && python -m mutmut run --max-children "$JOBS" $patterns >"$dir/run.log" 2>&1) \
    || { tail -40 "$dir/run.log"; echo "mutmut failed on $name" >&2; exit 1; }
  line=$(cd "$dir" && set -f && python - $patterns <<'EOF'
import fnmatch
import subprocess
import sys

pats = sys.argv[1:]
out = subprocess.run([sys.executable, "-m", "mutmut", "results", "--all", "true"],
                     capture_output=True, text=True, check=True).stdout
rows = [ln.strip().rsplit(": ", 1) for ln in out.splitlines() if ": " in ln]
rows = [(k, s) for k, s in rows if any(fnmatch.fnmatch(k, p) for p in pats)]
# A timeout is a detected mutant too (it made a test hang: pytest-timeout fails it).
survivors = [k for k, s in rows if s not in ("killed", "timeout")]
print(f"{len(survivors)} not killed:", file=sys.stderr)
for k in survivors:
    print(subprocess.run([sys.executable, "-m", "mutmut", "show", k], capture_output=True,
                         text=True).stdout, file=sys.stderr)
killed = len(rows) - len(survivors)
timeouts = sum(s == "timeout" for _, s in rows)
print(f"{killed} / {len(rows)} killed ({timeouts} by timeout), {len(survivors)} not killed")
EOF
  )
  echo "--- $name: $line ($((SECONDS - t0)) s)"
  SUMMARY+=("$(printf '%-12s %-26s %s' "$name" "$file" "$line")")
done

echo
echo "=== mutation score (mutmut $(python -c 'import importlib.metadata as m; print(m.version("mutmut"))'), $((SECONDS - start)) s)"
printf '%s\n' "${SUMMARY[@]}"
