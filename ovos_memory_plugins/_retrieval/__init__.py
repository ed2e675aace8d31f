"""What the retrieval backends share below ``retrieval.py``: the document log, neighbouring
exchanges, the keyword postings kept in RAM, stop words and the vector matrix."""
