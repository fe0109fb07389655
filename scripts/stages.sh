# Sourced by scripts/test.sh: runs named stages, times them, and prints the stage table when
# the script ends (passed or failed), so a CI log always says where the time went.
STAGE_NAMES=()
STAGE_SECONDS=()
STAGE_STATUS=()
STAGES_START=$(date +%s)

stage() {  # stage NAME COMMAND...
  local name="$1" start rc
  shift
  echo "::: stage $name ($(date +%H:%M:%S))"
  start=$(date +%s)
  set +e
  (set -e; "$@")
  rc=$?
  set -e
  STAGE_NAMES+=("$name")
  STAGE_SECONDS+=($(($(date +%s) - start)))
  STAGE_STATUS+=("$([ $rc -eq 0 ] && echo ok || echo "FAILED ($rc)")")
  return $rc
}

print_stage_table() {
  local total=$(($(date +%s) - STAGES_START)) i
  echo
  echo "| stage | seconds | mm:ss | result |"
  echo "|---|---:|---:|---|"
  for i in "${!STAGE_NAMES[@]}"; do
    printf '| %s | %d | %d:%02d | %s |\n' "${STAGE_NAMES[$i]}" "${STAGE_SECONDS[$i]}" \
      $((STAGE_SECONDS[i] / 60)) $((STAGE_SECONDS[i] % 60)) "${STAGE_STATUS[$i]}"
  done
  printf '| total | %d | %d:%02d | |\n' "$total" $((total / 60)) $((total % 60))
}
trap print_stage_table EXIT
