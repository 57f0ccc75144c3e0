print("ens-client")
