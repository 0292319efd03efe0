relu = 5
