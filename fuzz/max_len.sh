# Sourced by fuzz/run.sh and fuzz/long_run.sh.
# The largest input each target is given: room for a few times the largest real file of its kind,
# so that long runs do not drift into inputs far longer than the parser meets (each costing more).
max_len() {
  case $1 in
    configs | png_metadata) echo 8192 ;;  # config.json files are under 2 KB, PNG settings texts ~1 KB
    tokenizer) echo 32768 ;;              # the tiny model's vocab + merges + config: 18.6 KB
    *) echo 65536 ;;                      # files: headers, tables and some tensor bytes
  esac
}
