"""What a person sees: the summary, the progress line, a command's exit
statuses and one-line errors."""
