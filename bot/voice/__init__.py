"""Voice notes: transcribed on this machine (or by a transcription server), shown as a draft."""
