local t = os.time()
