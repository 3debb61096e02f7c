"""What the result-handler tests share: the seed's handler (generative-invocation.md), as its list of lines."""

SEED_HANDLER = [
    "summary = {'files_changed': 0, 'insertions': 0, 'deletions': 0}",
    "for line in tool_output.split('\\n'):",
    "    if line.startswith('---') or line.startswith('+++'):",
    "        continue",
    "    if line.startswith('diff --git'):",
    "        summary['files_changed'] += 1",
    "    elif line.startswith('+'):",
    "        summary['insertions'] += 1",
    "    elif line.startswith('-'):",
    "        summary['deletions'] += 1",
    "summary",
]
